"""Environment identity (SPEC.md section 5; rules R2, R11): what GPU, driver, toolkit and host a
measurement ran on, so that samples can prove they share an environment.

:func:`collect` reads the GPU through NVML (``import pynvml``, from the ``nvidia-ml-py`` package)
and CuPy, the toolkit through ``nvcc --version`` and ``ncu --version``, and the host through the
standard library. Anything it cannot read is recorded as missing (``None``, and named in
:attr:`Environment.missing`), never guessed: on a machine without a GPU every GPU field is
missing and :func:`collect` still succeeds.

:meth:`Environment.identity` is a blake3 hash over the canonical JSON of the fields that define
the environment (volatile readings such as clocks at rest and the time of collection are left
out), so two runs on the same machine and software get the same identity.
:meth:`Environment.readiness_environment` maps the identity onto the ``environment`` object of a
``readiness.record`` request (gpu, driver, cuda, toolkit, container lineage), whose hash is the
``environment_id`` that baseline and samples must carry (R11).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import blake3

from perfledger.events.canonical import canonical_bytes
from perfledger.kernels.python_tree import python_tree

#: Domain prefix of the identity hash (changing the field set changes the version; v2 added
#: ``python_tree``).
IDENTITY_DOMAIN = b"perfledger-env-identity-v2\x00"
#: Fields excluded from the identity: readings that change while the environment does not.
VOLATILE_FIELDS = frozenset(
    {"sm_clock_mhz_at_rest", "mem_clock_mhz_at_rest", "collected_by", "python_tree_stamp"}
)
#: Seconds allowed for one ``--version`` call of a tool.
TOOL_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Environment:
    """The environment identity of one GPU (device 0 unless told otherwise) and its host.

    Every field is a string, an int, a bool or None (missing). Units: ``*_bytes`` in bytes,
    ``*_mhz`` in MHz.

    Attributes:
        gpu_name, gpu_uuid: NVML's name and UUID.
        compute_capability: ``"9.0"``.
        sm_count: streaming multiprocessors.
        l2_bytes: L2 cache size.
        memory_bytes: total device memory.
        driver_version: NVIDIA driver (NVML).
        cuda_driver_version: CUDA driver API version (``"13.0"``).
        cuda_runtime_version: CUDA runtime version CuPy uses.
        cupy_version, nvml_version: library versions.
        nvcc_version, ncu_version: toolkit versions (``release 13.0, V13.0.48``), None if absent.
        sm_clock_mhz_at_rest, mem_clock_mhz_at_rest: clocks when collected (volatile).
        persistence_mode, mig_mode: NVML modes (True = enabled).
        cpu, os, python: host CPU model, OS/kernel, Python version.
        python_tree: blake3 digest of the Python installation's files (interpreter, standard
            library, site-packages, editable installs' sources;
            :func:`perfledger.kernels.python_tree.python_tree`), so an edited installed package
            is another environment (R11).
        python_tree_stamp: the installation's files' sizes, times and inodes when collected
            (volatile: ``measure`` compares it after the run, R11).
        container: container hints (``docker``, ``podman``, ``kubernetes``, ``firecracker``...)
            joined by ``,``; None when none was seen (not proof that there is none).
        device_index: which device these fields describe.
        missing: names of the fields that could not be read, with ``errors`` saying why.
    """

    gpu_name: str | None = None
    gpu_uuid: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cuda_runtime_version: str | None = None
    cupy_version: str | None = None
    nvml_version: str | None = None
    nvcc_version: str | None = None
    ncu_version: str | None = None
    sm_clock_mhz_at_rest: int | None = None
    mem_clock_mhz_at_rest: int | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    cpu: str | None = None
    os: str | None = None
    python: str | None = None
    python_tree: str | None = None
    python_tree_stamp: str | None = None
    container: str | None = None
    device_index: int = 0
    collected_by: str = "perfledger.kernels.env"
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        """Names of the identity fields that are missing (None), sorted."""
        return sorted(
            f.name
            for f in fields(self)
            if f.name not in {"errors", "collected_by", "python_tree_stamp"}
            and getattr(self, f.name) is None
        )

    @property
    def has_gpu(self) -> bool:
        """True when a GPU was found (its name was read)."""
        return self.gpu_name is not None

    def identity_fields(self) -> dict[str, Any]:
        """The fields that define the environment (volatile readings and errors left out)."""
        data = asdict(self)
        data.pop("errors")
        for name in VOLATILE_FIELDS:
            data.pop(name, None)
        return data

    def identity(self) -> str:
        """blake3 hex of the canonical JSON of :meth:`identity_fields` (R11: same environment,
        same identity)."""
        return blake3.blake3(IDENTITY_DOMAIN + canonical_bytes(self.identity_fields())).hexdigest()

    def readiness_environment(self) -> dict[str, str | None]:
        """The ``environment`` object of a ``readiness.record`` request (R2): ``gpu`` (name and
        UUID), ``driver``, ``cuda`` (driver API), ``toolkit`` (nvcc), container lineage. Missing
        items are None ("recorded as missing"); the container's base/overlay are never known
        from inside it, so they stay None."""
        gpu = None
        if self.gpu_name is not None:
            gpu = self.gpu_name if self.gpu_uuid is None else f"{self.gpu_name} {self.gpu_uuid}"
        return {
            "gpu": gpu,
            "driver": self.driver_version,
            "cuda": self.cuda_driver_version,
            "toolkit": self.nvcc_version,
            "container_base": None,
            "container_overlay": None,
            "container_runtime": self.container,
        }

    def to_json(self) -> dict[str, Any]:
        """All fields as JSON builtins, plus ``identity`` and ``missing``."""
        return {**asdict(self), "identity": self.identity(), "missing": self.missing}


def _cuda_version(code: int) -> str:
    """CUDA's integer version (13000) as ``"13.0"``."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_nvml(index: int, out: dict[str, Any], errors: dict[str, str]) -> None:
    try:
        import pynvml  # noqa: PLC0415 (NVML: optional)
    except ImportError as exc:
        errors["nvml"] = f"pynvml not importable (install nvidia-ml-py): {exc}"
        return
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        errors["nvml"] = f"NVML did not initialise: {exc}"
        return
    try:
        readers: dict[str, Any] = {
            "nvml_version": lambda h: _text(pynvml.nvmlSystemGetNVMLVersion()),
            "driver_version": lambda h: _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": lambda h: _cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()),
            "gpu_name": lambda h: _text(pynvml.nvmlDeviceGetName(h)),
            "gpu_uuid": lambda h: _text(pynvml.nvmlDeviceGetUUID(h)),
            "compute_capability": lambda h: "{}.{}".format(
                *pynvml.nvmlDeviceGetCudaComputeCapability(h)
            ),
            "memory_bytes": lambda h: int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            "sm_clock_mhz_at_rest": lambda h: int(
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            ),
            "mem_clock_mhz_at_rest": lambda h: int(
                pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
            ),
            "persistence_mode": lambda h: bool(pynvml.nvmlDeviceGetPersistenceMode(h)),
            "mig_mode": lambda h: bool(pynvml.nvmlDeviceGetMigMode(h)[0]),
        }
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            errors["nvml"] = f"no GPU at index {index}: {exc}"
            handle = None
        for name, read in readers.items():
            if handle is None and name not in {
                "nvml_version",
                "driver_version",
                "cuda_driver_version",
            }:
                continue
            try:
                out[name] = read(handle)
            except Exception as exc:  # NVMLError_NotSupported and friends: missing, not guessed
                errors[name] = f"NVML: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _read_cupy(index: int, out: dict[str, Any], errors: dict[str, str]) -> None:
    try:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
    except ImportError as exc:
        errors["cupy"] = f"CuPy not importable: {exc}"
        return
    out["cupy_version"] = cupy.__version__
    try:
        out["cuda_runtime_version"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        props = cupy.cuda.runtime.getDeviceProperties(index)
        out["sm_count"] = int(props["multiProcessorCount"])
        out["l2_bytes"] = int(props["l2CacheSize"])
        out.setdefault("memory_bytes", int(props["totalGlobalMem"]))
        out.setdefault("compute_capability", f"{props['major']}.{props['minor']}")
        out.setdefault("gpu_name", _text(props["name"]))
    except Exception as exc:  # no device, no driver
        errors["cupy_device"] = f"CuPy could not read device {index}: {exc}"


def tool_version(tool: str, pattern: str) -> tuple[str | None, str | None]:
    """Run ``tool --version`` and return ``(version, error)``: the first match of ``pattern``
    (a regex whose group 1 is the version) in its output, or None with the reason."""
    path = shutil.which(tool)
    if path is None:
        return None, f"{tool} not on PATH"
    try:
        proc = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{tool} --version failed: {exc}"
    match = re.search(pattern, proc.stdout + proc.stderr)
    if match is None:
        return None, f"{tool} --version printed no version (exit {proc.returncode})"
    return match.group(1).strip(), None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def container_hints() -> str | None:
    """Container hints seen from inside: ``docker`` (/.dockerenv), ``podman``
    (/run/.containerenv), ``kubernetes`` ($KUBERNETES_SERVICE_HOST), ``firecracker`` (kernel
    release); joined by ``,``, None when none was seen."""
    hints = []
    if os.path.exists("/.dockerenv"):
        hints.append("docker")
    if os.path.exists("/run/.containerenv"):
        hints.append("podman")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        hints.append("kubernetes")
    if "-fc-" in platform.release() or "firecracker" in platform.release():
        hints.append("firecracker")
    return ",".join(hints) or None


def collect(device_index: int = 0, *, tools: bool = True, tree: bool = True) -> Environment:
    """Collect the environment identity of GPU ``device_index`` and the host.

    Args:
        device_index: the CUDA/NVML device index.
        tools: also run ``nvcc --version`` and ``ncu --version`` (a few hundred ms).
        tree: also hash the Python installation (``python_tree``; cached per file, so only the
            first collection on a machine reads every file).
    Returns: the :class:`Environment`; never raises for a missing GPU, library or tool (the
        fields are None and ``errors`` says why).
    """
    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    _read_nvml(device_index, out, errors)
    _read_cupy(device_index, out, errors)
    if tools:
        out["nvcc_version"], err = tool_version("nvcc", r"release ([0-9.]+, V[0-9.]+)")
        if err:
            errors["nvcc_version"] = err
        out["ncu_version"], err = tool_version(
            "ncu", r"Version ([0-9][0-9.]*(?: \(build [0-9]+\))?)"
        )
        if err:
            errors["ncu_version"] = err
    else:
        errors["nvcc_version"] = errors["ncu_version"] = "not collected (tools=False)"
    out["cpu"] = _cpu_model()
    out["os"] = f"{platform.system()} {platform.release()}"
    out["python"] = f"{platform.python_implementation()} {sys.version.split()[0]}"
    out["container"] = container_hints()
    if tree:
        tree_now = python_tree()
        out["python_tree"], out["python_tree_stamp"] = tree_now.digest, tree_now.stamp
    else:
        errors["python_tree"] = "not collected (tree=False)"
    return Environment(device_index=device_index, errors=errors, **out)


__all__ = ["IDENTITY_DOMAIN", "Environment", "collect", "container_hints", "tool_version"]
