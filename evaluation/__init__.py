"""crossmod's evaluations: commands that run the built tools on real and generated
programs, interleaved and repeated, and write the data the results/ reports quote.

    python3 -m evaluation COMMAND [options]     (COMMAND: peers)

Shared run/rotate/interval code is in common.py; each command is one module with
add_arguments(parser) and main(args).
"""
