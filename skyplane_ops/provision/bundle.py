"""The self-contained gateway agent bundle shipped to every gateway host.

Choice (documented in README "Provisioning"): the bundle is a zip of the ``gateway_agent``
package only, run as ``PYTHONPATH=agent.zip python -m gateway_agent``. Its third-party
dependencies (google-crc32c, zstandard, cryptography, tenacity; crc32c and httptools when
available) are mostly C extensions that cannot be imported from a zip, so they are made
available in one of two ways:

1. **host**: the host's python already imports them (checked over SSH before starting) - the
   common case for a prepared image, and the loopback test hosts;
2. **wheels**: the caller gives a wheelhouse (``build_wheelhouse`` fills one with ``pip
   download`` for the host's python version and platform); the wheels are uploaded and unpacked
   with the host's own ``zipfile`` module into ``deps/`` next to the bundle, which needs no pip
   on the host (stock cloud images often have none).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import py_compile
import shlex
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.secrets import private_dir

AGENT_PACKAGE = "gateway_agent"
# Distribution names the agent needs at run time, and the modules that prove they import.
# crc32c is the agent's fast checksum path (about 2.4x google-crc32c) and httptools the S3
# store's fast path for small requests (``stores/s3/rawhttp.py``: a 1 KiB PutObject or
# GetObject in about half the CPU of urllib3); the agent falls back to google-crc32c and
# urllib3 when they are missing, so they are shipped in wheelhouses but not required to import.
AGENT_REQUIREMENTS = (
    "google-crc32c",
    "crc32c",
    "httptools",
    "zstandard",
    "cryptography",
    "tenacity",
)
AGENT_IMPORTS = ("google_crc32c", "zstandard", "cryptography", "tenacity")
# A fixed timestamp keeps the zip byte-identical for identical sources (stable digest).
_EPOCH = (1980, 1, 1, 0, 0, 0)
KEEP_BUNDLES = 5


@dataclass(frozen=True)
class AgentBundle:
    """A built bundle: the zip on disk and the digest that names it on remote hosts (of its
    sources and bytecode tag: ``sources_digest``)."""

    path: Path
    digest: str

    @property
    def remote_name(self) -> str:
        return f"gateway_agent-{self.digest[:12]}.zip"


def _package_dir() -> Path:
    spec = importlib.util.find_spec(AGENT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProvisionError(f"cannot find the {AGENT_PACKAGE} package to bundle")
    return Path(next(iter(spec.submodule_search_locations)))


def _bytecode(path: Path, arcname: str, scratch: Path) -> bytes:
    """``path`` compiled by this interpreter as an unchecked hash-based ``.pyc``: no timestamp
    to check, so it is used as is wherever this interpreter imports the bundle."""
    out = scratch / "module.pyc"
    py_compile.compile(
        str(path),
        cfile=str(out),
        dfile=arcname,
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    return out.read_bytes()


def _sources(package_dir: Path | None) -> list[tuple[str, Path]]:
    """The agent's ``.py`` files as (name in the zip, path), in a fixed order."""
    root = package_dir or _package_dir()
    if not (root / "__main__.py").exists():
        raise ProvisionError(
            f"{root} has no __main__.py: the agent cannot run as 'python -m {AGENT_PACKAGE}'"
        )
    return [
        (f"{AGENT_PACKAGE}/{path.relative_to(root).as_posix()}", path)
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts
    ]


def bundle_bytes(package_dir: Path | None = None) -> bytes:
    """Zip the agent package's ``.py`` files, each with its bytecode, in a fixed order with
    fixed times.

    Python never writes bytecode for modules imported from a zip, so without it every agent
    start compiled the package again (0.16 s against 0.10 s to import the agent here). The
    ``.pyc`` files are this interpreter's: a host whose Python differs finds another magic
    number in them and compiles the ``.py`` next to them, as before. They are unchecked hash
    based (no clock involved), yet two processes may write them apart by a reference flag
    (marshal follows the process's reference counts): a bundle is named by its sources
    (``sources_digest``), not by these bytes."""
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        tempfile.TemporaryDirectory() as scratch,
    ):
        for arcname, path in _sources(package_dir):
            compiled = _bytecode(path, arcname, Path(scratch))
            for name, data in ((arcname, path.read_bytes()), (arcname + "c", compiled)):
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
    return buf.getvalue()


def sources_digest(package_dir: Path | None = None) -> str:
    """What names a bundle: its sources and the bytecode's interpreter, hashed without
    compiling anything (a run finds its bundle built in 2 ms, not 0.1 s)."""
    digest = hashlib.sha256(f"{sys.implementation.cache_tag}\0".encode())
    for arcname, path in _sources(package_dir):
        digest.update(f"{arcname}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_bundle(package_dir: Path | None = None, out_dir: Path | None = None) -> AgentBundle:
    """Build the bundle into ``$SKYPLANE_OPS_HOME/bundles`` (reused when sources are unchanged)."""
    digest = sources_digest(package_dir)
    target_dir = out_dir or private_dir("bundles")
    path = target_dir / f"gateway_agent-{digest[:12]}.zip"
    if not path.exists():
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(bundle_bytes(package_dir))
        tmp.replace(path)
        # Keep a few recent bundles (running fleets may still use them), drop the rest.
        old = sorted(target_dir.glob("gateway_agent-*.zip"), key=lambda p: p.stat().st_mtime)
        for stale in old[:-KEEP_BUNDLES]:
            stale.unlink(missing_ok=True)
    return AgentBundle(path=path, digest=digest)


def deps_check_command(python: str) -> str:
    """A shell command that exits 0 iff ``python`` imports every agent dependency."""
    return f"{python} -c 'import {', '.join(AGENT_IMPORTS)}'"


def unpack_wheels_command(python: str, wheel_dir: str, target: str) -> str:
    """Unpack uploaded wheels into ``target`` with the host python's zipfile (no pip needed)."""
    code = (
        "import glob,sys,zipfile\n"
        "for w in sorted(glob.glob(sys.argv[1] + '/*.whl')):\n"
        "    zipfile.ZipFile(w).extractall(sys.argv[2])"
    )
    return f'{python} -c "{code}" {wheel_dir} {target}'


def build_wheelhouse(
    dest: Path,
    *,
    python_version: str = f"{sys.version_info.major}.{sys.version_info.minor}",
    platform: str = "manylinux2014_x86_64",
) -> list[Path]:
    """Download binary wheels of the agent's dependencies for a host (uses pip and PyPI)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--platform",
        platform,
        "--dest",
        str(dest),
        *AGENT_REQUIREMENTS,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ProvisionError(f"pip download of agent wheels failed: {proc.stderr.strip()[-500:]}")
    return sorted(dest.glob("*.whl"))


# How long a fresh gateway lives before its control plane first renews its lease: long enough
# for the gap between a pipeline's provision step and its transfer step (see lease.py).
INITIAL_LEASE_S = 1800.0


def serve_args(
    *,
    host: str,
    secret_file: str,
    ready_file: str,
    gateway_id: str,
    region: str,
    idle_timeout: float,
    control_port: int = 0,
    data_port: int = 0,
    lease_s: float | None = None,
) -> list[str]:
    """``-m gateway_agent serve ...``: how every backend starts an agent (after ``python``)."""
    return [
        "-m",
        "gateway_agent",
        "serve",
        "--host",
        host,
        "--control-port",
        str(control_port),
        "--data-port",
        str(data_port),
        "--secret-file",
        secret_file,
        "--ready-file",
        ready_file,
        "--gateway-id",
        gateway_id,
        "--region",
        region,
        "--idle-timeout",
        str(idle_timeout),
        "--lease",
        str(INITIAL_LEASE_S if lease_s is None else lease_s),
    ]


# ---- the agent's environment ------------------------------------------------------------------

# What a gateway's environment holds, and nothing else: a gateway never inherits the control
# plane's credentials (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``, ``STORAGE_EMULATOR_HOST``,
# ``SKYPLANE_*``, ``AIRFLOW_*``, ``DAGSTER_*``); its store credentials come sealed in the job
# spec (``transfer.dispatch.credentials``). ``HOME`` is a private directory where the backend
# has one (so no ``~/.aws``, ``~/.azure`` or gcloud files of the user's are found), and
# ``PYTHONPATH`` only what makes the agent and its dependencies import.
AGENT_ENV_KEEP = ("PATH", "LANG", "TMPDIR")
AGENT_ENV_KEEP_PREFIXES = ("LC_",)


def agent_env(
    *, home: str, pythonpath: str | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-list environment an agent started on this host runs with: ``PATH``,
    ``LANG``, ``LC_*`` and ``TMPDIR`` from ``base`` (default: this process's environment),
    ``HOME=home`` and ``PYTHONPATH=pythonpath`` when given."""
    source = os.environ if base is None else base
    env = {
        k: v
        for k, v in source.items()
        if k in AGENT_ENV_KEEP or k.startswith(AGENT_ENV_KEEP_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    env["HOME"] = home
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def agent_env_command(pythonpath: str) -> str:
    """The same allow-list for an agent started by a remote shell: an ``env -i`` prefix that
    keeps the login's ``PATH``, ``HOME``, ``LANG``, ``LC_ALL``, ``LC_CTYPE`` and ``TMPDIR``
    (the host's own, never the control plane's) and sets ``PYTHONPATH``."""
    kept = " ".join(
        f'${{{name}:+"{name}=${name}"}}' for name in ("LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
    )
    return f'env -i PATH="$PATH" HOME="$HOME" {kept} PYTHONPATH={shlex.quote(pythonpath)}'
