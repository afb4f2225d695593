#!/usr/bin/env python3
"""--help and the docs say the same thing: compares the option lists.

Usage: scripts/check-help-docs.py BINARY [REPO_DIR]

1. Every long option of every subcommand's --help (and of the global options) is mentioned, as
   `--name`, in the doc that documents that subcommand (DOCS below).
2. Every `--name` that README.md or docs/*.md write after a subcommand's name, in an inline code
   span or a line of a code block (`relay --lease 3s`, `outbox-lab --db x.db check --drain`), is an
   option of that subcommand or a global one.
3. Every other `--name` in backticks or code blocks is an option of some subcommand, or of one of
   the repository's scripts and the tools the docs run (OTHER_TOOLS below).
4. The exit codes of src/cli/exit_code.h are the rows of docs/exit-codes.md's table and of the
   README's short one.
Prints one line per finding and exits 1 if there is any; 0 with a count otherwise.
"""
import pathlib
import re
import subprocess
import sys

# The doc that documents each subcommand: its options must be mentioned there (or in the other
# files listed with it).
DOCS = {
    '': ['docs/commands.md', 'docs/routing-and-headers.md'],  # the global options
    'reset': ['docs/commands.md'],
    'naive-hold': ['docs/commands.md', 'docs/chapter.md'],
    'naive-send-first-hold': ['docs/commands.md'],
    'rollback': ['docs/commands.md', 'docs/chapter.md'],
    'write-hold': ['docs/commands.md'],
    'publish-hold': ['docs/commands.md'],
    'publish': ['docs/commands.md'],
    'write': ['docs/commands.md'],
    'verify': ['docs/chapter.md', 'docs/commands.md', 'docs/exactly-once.md'],
    'consume': ['docs/failpoints-and-checker.md', 'docs/commands.md', 'docs/exactly-once.md'],
    'check': ['docs/failpoints-and-checker.md', 'docs/exactly-once.md'],
    'failpoints': ['docs/failpoints-and-checker.md'],
    'relay': ['docs/relay.md', 'docs/operations.md', 'docs/exactly-once.md', 'docs/wal-relay.md',
              'docs/routing-and-headers.md'],
    'status': ['docs/relay.md'],
    'metrics': ['docs/relay.md'],
    'purge': ['docs/relay.md'],
    'parked': ['docs/relay.md'],
    'unpark': ['docs/relay.md'],
    'broker': ['docs/real-kafka.md'],
    'broker-ctl': ['docs/real-kafka.md'],
    'bench': ['docs/benchmark.md'],
    'batch-loop': ['docs/benchmark.md'],
    'report': ['docs/report.md'],
    'power-cut': ['docs/power-loss.md'],
}

# Options the docs name that belong to other programs: the repository's scripts and scenarios,
# and the tools the docs run. Each with the program it belongs to.
OTHER_TOOLS = {
    '--with-browser': 'scripts/install-deps.sh', '--with-kafka': 'scripts/install-deps.sh',
    '--nodes': 'scripts/kafka.sh', '--rounds': 'scripts/bench-brokers.sh',
    '--report': 'scenarios (lib.sh)', '--postgres': 'scenarios/crash-sweep.sh',
    '--seed': 'scenarios/kill-soak.sh', '--kills': 'scenarios/kill-soak.sh',
    '--events': 'scenarios/kill-soak.sh', '--relays': 'scenarios/kill-soak.sh',
    '--until-fail': 'scenarios/kill-soak.sh', '--schedule-only': 'scenarios/kill-soak.sh',
    '--instant-share': 'scenarios/kill-soak.sh', '--pause-share': 'scenarios/kill-soak.sh',
    '--power-cut-every': 'scenarios/kill-soak.sh', '--screenshot': 'chromium, scenarios/report-browser.sh',
    '--headless': 'chromium', '--dump-dom': 'chromium', '--from-beginning': 'kafka-console-consumer',
    '--build': 'cmake', '--test-dir': 'ctest', '--output-on-failure': 'ctest',
    '--bootstrap-server': 'Kafka tools', '--topic-name': 'Kafka tools',
    '--inclusive': 'callgrind_annotate', '--tool': 'valgrind',
}

OPTION = re.compile(r'(?<![\w-])(--[a-z][a-z0-9-]*)')


def run_help(binary, args):
    out = subprocess.run([binary, *args, '--help'], capture_output=True, text=True, check=True)
    return out.stdout


def options_of(help_text, subcommand):
    """The long options of one --help text: for a subcommand, those before its global options."""
    if subcommand:
        help_text = help_text.split('\nGlobal options', 1)[0]
    names = set()
    for line in help_text.splitlines():
        m = re.match(r'^  (-[^ ]+)', line)
        if not m:
            continue
        # CLI11 prints a flag with its negation as "--flag,--no-flag{false}": the default after
        # the braces is not part of the name.
        for name in re.sub(r'\{[^}]*\}$', '', m.group(1)).split(','):
            if name.startswith('--') and name != '--help':
                names.add(name)
    return names


def code_texts(markdown):
    """Inline code spans and code-block lines of a markdown text, with their line numbers."""
    fence = False
    lines = markdown.splitlines()
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith('```'):
            fence = not fence
            continue
        if fence:
            # A command shown with the usage error it gets is wrong on purpose.
            if number < len(lines) and lines[number].startswith('outbox-lab: error:'):
                continue
            yield number, line
        else:
            for span in re.findall(r'`([^`]+)`', line):
                yield number, span


def main():
    binary = sys.argv[1]
    repo = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else pathlib.Path(__file__).parent.parent)
    top = run_help(binary, [])
    subcommands = [m.group(1) for m in re.finditer(r'^  ([a-z][a-z-]*) ', top.split('\nSubcommands:', 1)[1], re.M)]
    options = {'': options_of(top, '')}
    for sub in subcommands:
        options[sub] = options_of(run_help(binary, [sub]), sub)
    every_option = set().union(*options.values())
    findings = []

    # 1. --help -> docs
    for sub in subcommands:
        if sub not in DOCS:
            findings.append(f'{sub}: a subcommand no doc is assigned to (scripts/check-help-docs.py DOCS)')
            continue
    for sub, docs in DOCS.items():
        if sub and sub not in options:
            findings.append(f'{sub}: assigned to {docs[0]} but not a subcommand of the binary')
            continue
        text = '\n'.join((repo / d).read_text() for d in docs)
        mentioned = set(OPTION.findall(text))
        for name in sorted(options[sub] - mentioned):
            findings.append(f'{sub or "global option"} {name}: in --help, not in {" or ".join(docs)}')

    # 2 and 3. docs -> --help
    files = [repo / 'README.md', *sorted((repo / 'docs').glob('*.md'))]
    checked = 0
    sub_pattern = '|'.join(sorted(map(re.escape, subcommands), key=len, reverse=True))
    invocation = re.compile(r'(?:^|[\s$(])(?:outbox-lab|OutboxLab|\$L)?\s*(?:(?:--[a-z-]+|-X)(?:[ =]\S+)?\s+)*'
                            r'(' + sub_pattern + r')(?=\s|$)(.*)')
    for path in files:
        rel = path.relative_to(repo)
        for number, text in code_texts(path.read_text()):
            for name in OPTION.findall(text):
                checked += 1
                if name not in every_option and name not in OTHER_TOOLS and name != '--help':
                    findings.append(f'{rel}:{number}: {name} is no option of outbox-lab, nor of a tool the docs name')
            # An invocation: the subcommand's name as a command word, then its options.
            for segment in re.split(r'[;|&]|\$\(', text):
                m = invocation.search(segment)
                if not m:
                    continue
                sub, rest = m.group(1), m.group(2)
                before = segment[:m.start(1)]
                # Only where the word is a command: at the start, after outbox-lab/OutboxLab/$L,
                # or after global options.
                if not re.search(r'(^\s*|outbox-lab\s+|OutboxLab\s+|\$L\s+|(--[a-z-]+|-X)[ =]?\S*\s+)$', before):
                    continue
                rest = rest.split('#', 1)[0]
                for name in OPTION.findall(rest):
                    if name not in options[sub] and name not in options[''] and name != '--help':
                        findings.append(f'{rel}:{number}: `{sub} ... {name}`: {sub} has no option {name}')

    # 4. The exit codes: the enum main.cc picks from, the full table and the README's short one.
    enum = set(map(int, re.findall(r'^\s*k\w+ = (\d+),', (repo / 'src/cli/exit_code.h').read_text(), re.M)))
    for table in ('docs/exit-codes.md', 'README.md'):
        codes = set(map(int, re.findall(r'^\| (\d+) \|', (repo / table).read_text(), re.M)))
        for code in sorted(enum - codes):
            findings.append(f'{table}: exit code {code} (src/cli/exit_code.h) is not in its table')
        for code in sorted(codes - enum):
            findings.append(f'{table}: exit code {code} is in its table but not in src/cli/exit_code.h')

    for f in findings:
        print(f'check-help-docs: {f}')
    if findings:
        print(f'check-help-docs: {len(findings)} findings', file=sys.stderr)
        return 1
    total = sum(len(v) for v in options.values())
    print(f'check-help-docs: {len(subcommands)} subcommands, {total} options in --help, all documented; '
          f'{checked} option names in the docs, all real; {len(enum)} exit codes in both tables')
    return 0


if __name__ == '__main__':
    sys.exit(main())
