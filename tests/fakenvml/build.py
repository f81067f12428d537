"""Build the fake ``libnvidia-ml.so.1`` for the tests and write its "hardware" file.

    python -m tests.fakenvml.build OUTDIR      # OUTDIR/libnvidia-ml.so.1 and
                                              # OUTDIR/old-driver/libnvidia-ml.so.1

The fake and its helpers live in the package (agent/sim/fakenvml: ``gpuwatch demo`` builds it
from an installed wheel too); the tests import them from here. The file format is documented
at the top of ``fakenvml.c``; :class:`FakeNvmlConfig` renders it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent.sim.fakenvml.build import (
    LIB_NAME,
    MARKER,
    OLD_DRIVER_DIR,
    SOURCE,
    build,
    build_all,
    find_header_dir,
    is_fake,
)
from agent.sim.fakenvml.hardware import (
    FakeGpm,
    FakeGpu,
    FakeMig,
    FakeNvmlConfig,
    FakeProcess,
    FakeRemap,
    FakeXid,
    GiB,
    write_config,
)

__all__ = [
    "LIB_NAME", "MARKER", "OLD_DRIVER_DIR", "SOURCE", "FakeGpm", "FakeGpu", "FakeMig",
    "FakeNvmlConfig", "FakeProcess", "FakeRemap", "FakeXid", "GiB", "build", "build_all",
    "find_header_dir", "is_fake", "write_config",
]  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.fakenvml.build OUTDIR", file=sys.stderr)
        return 2
    for library in build_all(Path(argv[0])):
        print(library)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
