"""Where the checkout is: the one place that derives it from this package's own location."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # <checkout>/site_scons/opencoti_build/project.py
PACKAGE_DIR = Path(__file__).resolve().parent  # opencoti_build itself
SITE_SCONS = PACKAGE_DIR.parent
