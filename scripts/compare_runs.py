"""Compare the JSON results of the translated CUDA run and the hand-ported CPU run.

Used by scripts/demo.sh: prints whether the losses (and every other number the
two programs share, timing and memory excepted) are identical.
"""
import json
import sys

SKIP = ("ms", "memory", "mem_", "elapsed", "time", "backend", "device")


def numbers(result):
    return {k: v for k, v in result.items() if not any(s in k for s in SKIP)}


def main(translated_path, ported_path):
    with open(translated_path) as f:
        translated = numbers(json.load(f))
    with open(ported_path) as f:
        ported = numbers(json.load(f))
    shared = sorted(set(translated) & set(ported))
    differ = [k for k in shared if translated[k] != ported[k]]
    if differ:
        print(f"differ from the hand-ported CPU run: {', '.join(differ)}")
        return 1
    print(f"identical to the hand-ported CPU run: {', '.join(shared)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
