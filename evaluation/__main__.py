"""Entry point: python3 -m evaluation COMMAND [options]. Exit 0 done, 2 bad usage (one
line on stderr, nothing written)."""
from __future__ import annotations

import argparse
import sys

from . import peers
from .common import UsageError

COMMANDS = {
    "peers": (peers, "probe-hit cost beside uftrace and uprobes on one generated program"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m evaluation")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (mod, help_text) in COMMANDS.items():
        mod.add_arguments(sub.add_parser(name, help=help_text, description=mod.__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter))
    args = p.parse_args(argv)
    try:
        return COMMANDS[args.command][0].main(args)
    except UsageError as e:
        print(f"evaluation {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
