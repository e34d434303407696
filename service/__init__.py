"""devplan's HTTP service and command line on top of `relay` and `solver`.

The package import is cheap on purpose: `devplan plan` must not pay for
FastAPI, and the planning worker processes only need `service.planning`.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("devplan")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"
