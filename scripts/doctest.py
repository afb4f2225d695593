#!/usr/bin/env python3
"""Doc-tests: runs the command blocks of README.md and docs/*.md that are marked runnable, and
compares what they print with what the block claims.

Usage: scripts/doctest.py --bin BUILD/outbox-lab [--repo DIR] [--list] [FILE.md ...]

Markers (an HTML comment on the line before a fenced block; the rest of the comment is free text):
  <!-- doctest -->       the block is run and its output compared
  <!-- illustration -->  the block shows commands that are not run here (a server, a real power
                         cut, minutes of work): it is not checked
Every fenced block that shows a command (a `$ ` prompt line, or a sh/bash/console block) must
carry one of the two, so no block claims an output that nobody checks.

A doctest block is a transcript: `$ COMMAND` lines, each followed by the output it claims (none:
the output is not compared, but the command must exit 0). Comparing:
  - a line `...` stands for any number of lines; `...` or `…` inside a line for any text;
  - stdout and stderr are read together, in order, except run.sh's own notices (`run.sh: ...`
    on stderr), which are not compared;
  - volatile parts are replaced on both sides before comparing: PIDs after `kill -9`,
    `kill -USR1` and `pid=`, and durations (`12ms`, `0.7s`).
A command ending in `&` runs in the background; what it prints counts as the output of the step
in which it appears (a step that claims output waits, bounded, until it matches). `kill -9 N`
kills the newest background process still running, whatever N the doc shows. `export` lines set
variables for the commands after them.

Each block runs in a fresh temporary directory, in a copy of the repository's entry points
(run.sh, scripts/wait-until.sh) whose build/outbox-lab is the binary under test and whose cmake
is a stand-in that builds nothing; `outbox-lab` is on PATH; every `/tmp/` of a command is
rewritten into the temporary directory (and back in the output). run.sh starts its embedded
broker there; it is stopped at the end of the block.
"""
import argparse
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r'^<!--\s*(doctest|illustration)\b.*-->\s*$')
HOLD_TIMEOUT_S = 30
COMMAND_TIMEOUT_S = 60
# Variables a caller's shell may have set that would change what the lab does.
CLEARED_ENV = ['OUTBOX_DB', 'OUTBOX_HISTORY', 'OUTBOX_TOPIC', 'OUTBOX_FAILPOINTS', 'OUTBOX_VFS',
               'OUTBOX_LANG', 'OUTBOX_BACKEND', 'OUTBOX_KAFKA', 'OUTBOX_LAB_FRONTEND',
               'KAFKA_BOOTSTRAP_SERVERS', 'OUTBOX_BROKER_CONTROL', 'OUTBOX_PG_URL']


class Block:
    def __init__(self, path, line, lang, body, mark):
        self.path, self.line, self.lang, self.body, self.mark = path, line, lang, body, mark

    def shows_commands(self):
        return self.lang in ('sh', 'bash', 'console', 'shell') or any(
            l.startswith('$ ') for l in self.body)


def blocks_of(path):
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r'^(\s*)```(\S*)', lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith('```'):
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]]
        mark = None
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0:
            mm = MARK.match(lines[k].strip())
            if mm:
                mark = mm.group(1)
        yield Block(path, start + 1, lang, body, mark)
        i = j + 1


def parse_transcript(body):
    """[(command, [claimed output lines])]; comments after a command are kept for bash."""
    steps = []
    for line in body:
        if line.startswith('$ '):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


VOLATILE = [
    (re.compile(r'(kill -9 |kill -USR1 |pid=)\d+'), r'\1PID'),
    (re.compile(r'\b\d+(\.\d+)?(ms|s)\b'), 'DURATION'),
]


def normalize(line):
    for pattern, repl in VOLATILE:
        line = pattern.sub(repl, line)
    return line.rstrip()


def line_matches(expected, actual):
    parts = re.split(r'\.\.\.|…', normalize(expected))
    pattern = '.*'.join(re.escape(p) for p in parts)
    return re.fullmatch(pattern, normalize(actual)) is not None


def output_matches(expected, actual):
    """expected lines with `...` lines as wildcards against actual lines."""
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            result = j == len(actual)
        elif expected[i].strip() == '...':
            result = match(i + 1, j) or (j < len(actual) and match(i, j + 1))
        else:
            result = j < len(actual) and line_matches(expected[i], actual[j]) and match(i + 1, j + 1)
        memo[(i, j)] = result
        return result

    return match(0, 0)


class Sandbox:
    def __init__(self, binary, repo):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix='outbox-doctest-'))
        self.tmp = self.dir / 'tmp'
        self.tmp.mkdir()
        self.repo = self.dir / 'repo'
        (self.repo / 'scripts').mkdir(parents=True)
        (self.repo / 'build').mkdir()
        shutil.copy2(repo / 'run.sh', self.repo / 'run.sh')
        shutil.copy2(repo / 'scripts' / 'wait-until.sh', self.repo / 'scripts' / 'wait-until.sh')
        os.symlink(os.path.realpath(binary), self.repo / 'build' / 'outbox-lab')
        (self.repo / 'build' / 'CMakeCache.txt').write_text('')
        bin_dir = self.dir / 'bin'
        bin_dir.mkdir()
        (bin_dir / 'cmake').write_text('#!/bin/sh\nexit 0\n')  # run.sh's build: nothing to do
        (bin_dir / 'cmake').chmod(0o755)
        os.symlink(os.path.realpath(binary), bin_dir / 'outbox-lab')
        self.env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
        self.env.update(PATH=f'{bin_dir}:{os.environ["PATH"]}', OUTBOX_LAB_STATE=str(self.dir / 'state'),
                        TMPDIR=str(self.tmp), LC_ALL='C.UTF-8')
        self.background = []  # (process, its output file, its path)
        self.consumed = {}  # background index -> bytes of its output already compared
        self.last_rc = 0

    def rewrite(self, command):
        return command.replace('/tmp/', f'{self.tmp}/')

    def unrewrite(self, text):
        return text.replace(f'{self.tmp}/', '/tmp/').replace(str(self.tmp), '/tmp')

    def lines_of(self, raw):
        lines = self.unrewrite(raw).splitlines()
        return [l for l in lines if not l.startswith('run.sh: ')]

    def run(self, command):
        """Starts or runs one command; returns (exit code, None for a background one, output lines)."""
        command = self.rewrite(command)
        if re.fullmatch(r'\s*kill -9 \d+\s*', command):
            live = [proc for proc, _, _ in self.background if proc.poll() is None]
            if not live:
                return 1, ['doctest: kill -9 with no background process running']
            # The newest: the one whose HOLD line the doc shows; its whole process group, so the
            # lab dies with the bash that started it (run.sh and a plain command exec into it).
            os.killpg(live[-1].pid, signal.SIGKILL)
            live[-1].wait()
            return 0, []
        if command.rstrip().endswith('&'):
            self.start_background(command.rstrip()[:-1])
            return None, []
        if command.startswith('export '):
            # Later commands see the variables: run it, then read bash's environment back.
            proc = subprocess.run(['bash', '-c', command + ' && env -0'], cwd=self.repo, env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S)
            if proc.returncode == 0:
                pairs = [e.split('=', 1) for e in proc.stdout.decode().split('\0') if '=' in e]
                self.env = {k: v for k, v in pairs if k not in ('_', 'SHLVL', 'PWD', 'OLDPWD')}
                return 0, []
            return proc.returncode, self.lines_of(proc.stdout.decode('utf-8', 'replace'))
        # `$?` is the previous command's exit code, as in the shell the transcript shows.
        proc = subprocess.run(['bash', '-c', f'(exit {self.last_rc}); {command}'], cwd=self.repo,
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=COMMAND_TIMEOUT_S)
        self.last_rc = proc.returncode
        return proc.returncode, self.lines_of(proc.stdout.decode('utf-8', 'replace'))

    def start_background(self, command):
        out_path = self.dir / f'bg-{len(self.background)}.out'
        out = open(out_path, 'wb')
        proc = subprocess.Popen(['bash', '-c', command], cwd=self.repo, env=self.env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.background.append((proc, out, out_path))

    def background_output(self):
        """What the background processes printed since the last call, as complete lines."""
        lines = []
        for i, (_, _, path) in enumerate(self.background):
            data = path.read_bytes()
            done = self.consumed.get(i, 0)
            end = data.rfind(b'\n') + 1
            if end > done:
                lines += self.lines_of(data[done:end].decode('utf-8', 'replace'))
                self.consumed[i] = end
        return lines

    def close(self):
        for proc, out, _ in self.background:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            out.close()
        # run.sh's embedded brokers live in the state directory: stop every one.
        subprocess.run(['bash', '-c', './run.sh stop-broker'], cwd=self.repo, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        for pid_file in (self.dir / 'state').glob('**/*.pid') if (self.dir / 'state').exists() else []:
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_block(block, binary, repo):
    """Runs a transcript. A step's output is the command's own, then what the background
    processes printed meanwhile; a step that claims output waits (up to HOLD_TIMEOUT_S) until
    that matches, so a HOLD line printed by a background process is waited for, never slept for."""
    sandbox = Sandbox(binary, repo)
    failures = []
    try:
        for command, claimed in parse_transcript(block.body):
            started = time.monotonic()
            rc, actual = sandbox.run(command)
            actual = actual + sandbox.background_output()
            if claimed:
                deadline = time.monotonic() + HOLD_TIMEOUT_S
                while not output_matches(claimed, actual) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    actual += sandbox.background_output()
                ok = output_matches(claimed, actual)
            else:
                ok = rc in (0, None)
                if not ok:
                    claimed = ['(exit 0)']
            if not ok:
                failures.append((command, claimed, actual, rc))
            print(f'  {time.monotonic() - started:5.1f}s {"ok  " if ok else "FAIL"} $ {command}')
    finally:
        sandbox.close()
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--bin', default=os.environ.get('OUTBOX_LAB_BIN'), help='the outbox-lab binary')
    parser.add_argument('--repo', default=str(pathlib.Path(__file__).resolve().parent.parent))
    parser.add_argument('--list', action='store_true', help='list the blocks and their marks only')
    parser.add_argument('files', nargs='*')
    args = parser.parse_args()
    repo = pathlib.Path(args.repo)
    files = [pathlib.Path(f) for f in args.files] or [repo / 'README.md', *sorted((repo / 'docs').glob('*.md'))]

    unmarked, doctests, illustrations = [], [], 0
    for path in files:
        for block in blocks_of(path):
            rel = os.path.relpath(block.path, repo)
            if block.mark == 'doctest':
                doctests.append(block)
            elif block.mark == 'illustration':
                illustrations += 1
            elif block.shows_commands():
                unmarked.append(f'{rel}:{block.line}')
            if args.list:
                print(f'{rel}:{block.line} {block.lang or "-"} {block.mark or ("UNMARKED" if block.shows_commands() else "output only")}')
    if args.list:
        return 0
    status = 0
    for where in unmarked:
        print(f'doctest: {where}: a block that shows commands is marked neither <!-- doctest --> nor <!-- illustration -->')
        status = 1
    if not args.bin:
        print('doctest: no binary: give --bin or OUTBOX_LAB_BIN', file=sys.stderr)
        return 2
    checked = 0
    for block in doctests:
        rel = os.path.relpath(block.path, repo)
        print(f'doctest: {rel}:{block.line}')
        failures = run_block(block, args.bin, repo)
        checked += 1
        for command, claimed, actual, rc in failures:
            status = 1
            print(f'doctest: {rel}:{block.line}: `$ {command}` (exit {rc}) printed:')
            print('\n'.join('    ' + l for l in actual) or '    (nothing)')
            print('  the doc claims:')
            print('\n'.join('    ' + l for l in claimed))
    print(f'doctest: {checked} blocks run and checked ({sum(len(parse_transcript(b.body)) for b in doctests)} commands), '
          f'{illustrations} marked as illustrations, {len(unmarked)} unmarked; '
          f'{"FAIL" if status else "PASS"}')
    return status


if __name__ == '__main__':
    sys.exit(main())
