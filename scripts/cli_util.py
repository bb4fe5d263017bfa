"""cli_util.py — the command-line conventions of the Python tools (scripts/*.py, data/openwebtext.py).

Every bad argument, input file or environment problem ends in exactly one line on stderr,
"error: ..." naming the flag or file, what was expected and what was found, and exit status 1;
never a traceback, and nothing written half way (outputs go to a temporary name beside the target,
then os.replace). Warnings are one line "warning: ..." on stderr and the tool goes on.

  ap = cli_util.ArgumentParser(...)            argparse whose usage errors are that one line, exit 1
  ap.add_argument("--mfu", type=cli_util.fraction)          range-checked numbers: finite_float,
      positive_float, nonnegative_float, fraction (0, 1], int_in(lo, hi), positive_int, ...
  ap.add_argument("--out", type=cli_util.output_file)       the parent directory exists, is writable,
                                                             and the path is not a directory
  data = cli_util.read_json(path, dict, "--baseline")       parsed, and of the expected type
  rows = cli_util.read_jsonl(path, "--run")                 a metrics.jsonl: its objects by line;
                                                             an unfinished last line is skipped
  with cli_util.atomic_path(path) as tmp: write(tmp)        renamed onto path once complete (0644)
  if __name__ == "__main__": cli_util.run(main)             what escapes main as OSError, ValueError,
                                                             ArithmeticError or MemoryError becomes
                                                             the one line too
"""
import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile

FILE_MODE = 0o644  # outputs are shared results: readable by all whatever the umask
INT_RE = re.compile(r"-?[0-9]+\Z")
FLOAT_RE = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\Z")  # not ' 5', 1_0 or 0x10


def die(msg):
    """Bad input: one line on stderr, exit status 1 (stdout flushed first, so the line comes last)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed pipe: the error line still goes out
        pass
    print("error: " + " ".join(str(msg).split("\n")), file=sys.stderr, flush=True)
    sys.exit(1)


def warn(msg):
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    print("warning: " + msg, file=sys.stderr, flush=True)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help gives every option's default, unless its help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or "default" in text or "required" in text:
            return text
        if action.required:
            return text + " (required)"
        if action.default is None:
            return text + " (default: none)"
        if action.default is False or action.default is argparse.SUPPRESS:  # a switch, or -h
            return text
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the tools' error convention: its message as the one line, exit status 1
    (argparse's own is the usage, then the message, exit 2); --help lists the defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        die(message)


# ---- argparse types: each refuses with "expected ..., found '...'" (argparse prefixes the flag)

def _number(s):
    if FLOAT_RE.match(s):
        x = float(s)
    elif s.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
        x = math.nan
    else:
        raise argparse.ArgumentTypeError(f"expected a number, found '{s}'")
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number, found '{s}'")
    return x


def finite_float(s):
    return _number(s)


def positive_float(s):
    x = _number(s)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, found '{s}'")
    return x


def nonnegative_float(s):
    x = _number(s)
    if not x >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, found '{s}'")
    return x


def fraction(s):
    """A fraction in (0, 1] (an MFU, a share): 5 is not 5%."""
    x = _number(s)
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], found '{s}'")
    return x


def parse_int(s, lo, hi):
    """An integer written plainly (digits, an optional '-'; not 1e3, 2.0, ' 5' or 1_000) in
    [lo, hi]; ValueError with the message otherwise."""
    if not isinstance(s, str) or not INT_RE.match(s):
        raise ValueError(f"expected an integer, found '{s}'")
    x = int(s)
    if not lo <= x <= hi:
        raise ValueError(f"expected an integer in [{lo}, {hi}], found {x}")
    return x


def int_in(lo, hi):
    """The argparse type of an integer in [lo, hi]."""
    def parse(s):
        try:
            return parse_int(s, lo, hi)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
    parse.__name__ = f"integer in [{lo}, {hi}]"
    return parse


INT_MAX = 2 ** 31 - 1   # the engine's flags are C ints
positive_int = int_in(1, INT_MAX)
nonnegative_int = int_in(0, INT_MAX)


def output_file(path):
    """The argparse type of a file to write: its directory exists and is writable, and the path is
    not a directory or other non-regular file (it is replaced by a rename). Returns the path."""
    if path == "":
        raise argparse.ArgumentTypeError("expected a file name, found ''")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"'{path}' is a directory, expected a file name")
    if os.path.lexists(path) and not os.path.isfile(path):  # a device, a FIFO, a dangling link: never replaced
        raise argparse.ArgumentTypeError(f"'{path}' exists and is not a regular file")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"the directory of '{path}' does not exist (expected an existing directory '{parent}')")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into '{parent}' (permission denied)")
    return path


FIGURE_FORMATS = ("png", "pdf", "svg")  # what matplotlib writes without further packages


def figure_format(path):
    return os.path.splitext(path)[1][1:].lower()


def figure_file(path):
    """output_file() of a figure: its name ends in .png, .pdf or .svg."""
    output_file(path)
    if figure_format(path) not in FIGURE_FORMATS:
        raise argparse.ArgumentTypeError(f"expected a figure file name ending in {', '.join('.' + f for f in FIGURE_FORMATS)}, "
                                         f"found '{path}'")
    return path


# ---- reading inputs

def _prefix(what):
    return f"{what}: " if what else ""


def read_text(path, what=None):
    """The file's text (bytes that are not UTF-8 replaced, so that they show up where they are).
    what: the flag or argument that named the file, for the error line (None: the path alone)."""
    if os.path.isdir(path):
        die(f"{_prefix(what)}'{path}' is a directory, expected a file")
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError as e:
        die(f"{_prefix(what)}cannot read '{path}' ({e.strerror})")


def type_name(x):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(x), type(x).__name__)


def describe(x):
    """A JSON value as an error message shows what was found: nan, true, "0.5", null, a list."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if is_number(x):
        r = repr(x)
        return r if len(r) <= 40 else f"{r[:12]}... ({len(r)} digits)"
    if isinstance(x, str):
        return json.dumps(x[:60])
    if x is None:
        return "null"
    return type_name(x)


def read_json(path, expected_type, what=None):
    """The parsed JSON file; one error line naming it when unreadable, not JSON or not of
    expected_type (dict or list)."""
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except ValueError as e:
        die(f"{_prefix(what)}'{path}' is not JSON ({e})")
    if not isinstance(data, expected_type):
        die(f"{_prefix(what)}'{path}' holds {describe(data)}, expected {type_name(expected_type())}")
    return data


def read_jsonl(path, what=None):
    """[(line number, object)] of a JSON-lines file such as a run's metrics.jsonl. A last line
    without its newline that does not parse is a line still being written (a live run): skipped
    with one warning. Any other line that is not a JSON object is an error naming the line."""
    text = read_text(path, what)
    lines = text.split("\n")
    unfinished = lines.pop()  # after the last newline: "" when the file ends with one
    out = []
    for k, line in enumerate(lines + [unfinished], 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            if k == len(lines) + 1:
                warn(f"'{path}' line {k} is unfinished (no newline at the end; a run still writing it?): skipped")
                continue
            die(f"{_prefix(what)}'{path}' line {k} is not a JSON object: {line[:80]!r}")
        if not isinstance(r, dict):
            die(f"{_prefix(what)}'{path}' line {k} is not a JSON object: {describe(r)}")
        out.append((k, r))
    return out


def is_number(x):
    """A JSON number (a boolean is not one)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite_number(x):
    """A JSON number that is a finite float (10**400, an integer in JSON, is not one)."""
    if not is_number(x):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


# ---- writing outputs

@contextlib.contextmanager
def atomic_path(path, mode=FILE_MODE):
    """Yields a temporary name in path's directory (same suffix, for writers that go by it); when
    the block completes, the file is given `mode` and renamed onto path; when it raises, the
    temporary file is removed and path is left as it was."""
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=os.path.splitext(base)[1], dir=d or ".")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_text(path, text, mode=FILE_MODE):
    with atomic_path(path, mode) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


# ---- the top level

def os_error_line(e):
    where = f"'{e.filename}'" if e.filename else ""
    if e.filename2:
        where += f" -> '{e.filename2}'"
    return f"{where}: {e.strerror or e}" if where else f"{e.strerror or e}"


def run(main, *args):
    """Runs main(*args) and exits with its status (None is 0). What escapes it as an OSError
    (a file that vanished, a full disk), ValueError, ArithmeticError or MemoryError becomes one
    error line, exit 1; a closed stdout (`| head`) exits 1 quietly."""
    try:
        rc = main(*args)
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as e:
        die(os_error_line(e))
    except (ValueError, ArithmeticError) as e:
        die(f"{type(e).__name__}: {e} (hint: check the numbers in the arguments and input files)")
    except MemoryError:
        die("out of memory (hint: check the sizes in the arguments and input files)")
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
