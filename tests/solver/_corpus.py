"""Where the shared corpus lives and which cases it holds (collected at import time)."""

from __future__ import annotations

from pathlib import Path

CORPUS = (Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus").resolve()
# Models whose text is large enough that parsing dominates; run with the slow stage.
SLOW_MODELS = {"squeezenet.bound", "mlp.bound"}


def corpus_cases(kind: str) -> list[tuple[str, Path]]:
    """(id, base path) of every case of `kind` ("planned", "conflict", "tvm-crash")."""
    if not CORPUS.is_dir():
        return []
    suffix = {"planned": ".planned.relay", "conflict": ".conflict.txt", "tvm-crash": ".tvm-crash.txt"}[kind]
    out = []
    for folder in (CORPUS, CORPUS / "random", CORPUS / "constructs"):
        for path in sorted(folder.glob(f"*{suffix}")):
            base = path.with_name(path.name[: -len(suffix)])
            if base.with_suffix(base.suffix + ".relay").exists() or Path(str(base) + ".relay").exists():
                out.append((f"{folder.name}/{base.name}", base))
    return out
