"""Entry point: python3 -m analysis results/<machine> [...]; see analysis/cli.py."""
import sys

from .cli import main

sys.exit(main())
