#!/usr/bin/env bash
# Installs outbox-lab's build and test dependencies from Debian 12 packages, only those missing.
#   --with-browser  also the optional group "browser": chromium (and the font the report's CSS
#                   names) for scenarios/report-browser.sh; scripts/test.sh passes it
#   --with-kafka    also the group "kafka": Debian's OpenJDK 17 and Maven, with which
#                   scripts/kafka.sh fetches and runs real Apache Kafka 4.3.0; scripts/test.sh passes it
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  librdkafka-dev libsqlite3-dev sqlite3
  libcli11-dev libfmt-dev nlohmann-json3-dev catch2
  kcat
  # what the scenarios and run.sh call besides the lab (jq reads every --json report; ps is
  # procps; timeout, mktemp and stdbuf are coreutils)
  jq procps coreutils
  # the PostgreSQL backend (issue 12): libpq to build, a server for scripts/postgres.sh and the
  # [postgres] tests (runuser, which runs initdb as the postgres user, is util-linux)
  libpq-dev postgresql-15 util-linux
  # scenarios/pg-clock-skew.sh runs one relay with its clock an hour ahead (libfaketime)
  faketime
  # scenarios/foreign-readers.sh reads the chapter's topic with clients that are not the lab:
  # kafkajs from npm (tools/kafkajs-reader, `npm ci` there) and confluent-kafka-python
  python3-confluent-kafka nodejs
  # the doc-tests (scripts/doctest.py, scripts/check-help-docs.py)
  python3
  # relay --http's server (a compiled library with a pkg-config file in Debian 12), and promtool
  # (package prometheus) for `promtool check metrics` and the alert rules' `promtool test rules`
  libcpp-httplib-dev prometheus curl
)
# Debian's nodejs has no npm (package npm); NodeSource's nodejs, installed as "nodejs", brings its
# own and conflicts with Debian's npm.
command -v npm >/dev/null 2>&1 || packages+=(npm)
for arg in "$@"; do
  case "$arg" in
    --with-browser) packages+=(chromium fonts-dejavu-core) ;;
    --with-kafka) packages+=(openjdk-17-jre-headless maven) ;;
    *) echo "outbox-lab: error: install-deps.sh: unknown argument '$arg' (known: --with-browser, --with-kafka)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all dependencies present"
  exit 0
fi

echo "[deps] missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "outbox-lab: error: not root; run: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "[deps] installed: ${missing[*]}"
