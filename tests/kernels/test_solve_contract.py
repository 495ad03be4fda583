"""Host-launched ``solve()`` subjects on the CPU (kernels/subjects/solve.py): the declared argument spec
and its refusals, the signature parsed from the source and checked against the spec, the
``ref.py`` contract, the nvcc command line, and a real host-only ``.cu`` built by the real nvcc
into a shared library and called through ctypes (skipped where nvcc is absent). GPU behaviour is
in ``test_subjects_gpu.py``."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfledger.errors import BadRequest
from perfledger.kernels.subjects import solve as sv
from perfledger.kernels.subjects import solve_args

SPEC = {
    "args": [
        ["x", "in", "float32*", ["n"]],
        ["y", "out", "float32*", ["n"]],
        ["n", "int"],
        ["stream", "stream"],
    ]
}
SOURCE = """
#include <cuda_runtime.h>
// a comment with extern "C" void solve(int nothing) must not be taken for the entry
extern "C" void solve(const float* __restrict__ x, float* y, int n, cudaStream_t stream) {
    for (int i = 0; i < n; ++i) y[i] = 2.0f * x[i];
}
"""
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def test_arg_spec_parses_buffers_scalars_and_the_stream() -> None:
    spec = sv.parse_arg_spec(SPEC)
    assert [a.kind for a in spec.args] == ["in", "out", "scalar", "stream"]
    assert spec.inputs[0].dtype == "float32" and spec.outputs[0].shape == ("n",)
    assert spec.scalars[0].dtype == "int32"
    assert spec.shapes({"n": 7}) == {"x": (7,), "y": (7,)}
    assert sv.parse_arg_spec(spec.to_json()) == spec  # the recorded form reads back the same


def test_arg_spec_object_entries_mean_the_same_as_lists() -> None:
    objects = [
        {"name": "x", "role": "in", "type": "float*", "shape": "n"},
        {"name": "y", "role": "out", "type": "float32*", "shape": ["n"]},
        {"name": "n", "type": "int"},
        {"name": "stream", "role": "stream"},
    ]
    assert sv.parse_arg_spec(objects) == sv.parse_arg_spec(SPEC)


def test_shapes_are_dims_expressions() -> None:
    spec = sv.parse_arg_spec([["a", "in", "half*", ["M", "K"]], ["c", "out", "float*", "M*N"],
                              ["M", "int"], ["N", "int64"], ["K", "size_t"], ["s", "stream"]])  # fmt: skip
    assert spec.shapes({"M": 2, "N": 3, "K": 4}) == {"a": (2, 4), "c": (6,)}
    assert spec.inputs[0].dtype == "float16"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"args": []}, "must be a list of parameters"),
        ("x", "must be a list of parameters"),
        ([["x", "in", "float32*", ["n"]], ["y", "out", "float32*", ["n"]]], "exactly one cudaStream_t"),
        ([["y", "out", "float*", ["n"]], ["s", "stream"], ["t", "stream"]], "exactly one cudaStream_t"),
        ([["x", "in", "float32*", ["n"]], ["s", "stream"]], "no output buffer"),
        ([["y", "inout", "float*", ["n"]], ["s", "stream"]], "inout"),
        ([["y", "out", "float*"], ["s", "stream"]], "a buffer is [name"),
        ([["y", "out", "float*", []], ["s", "stream"]], "needs a shape"),
        ([["y", "out", "float", ["n"]], ["s", "stream"]], "not a supported buffer type"),
        ([["y", "out", "complex*", ["n"]], ["s", "stream"]], "not a supported buffer type"),
        ([["y", "out", "float*", ["n"]], ["n", "quad"], ["s", "stream"]], "unknown role or scalar type"),
        ([["y", "out", "float*", ["n"]], ["y", "int"], ["s", "stream"]], "duplicate parameter names"),
        ([["2y", "out", "float*", ["n"]], ["s", "stream"]], "is not an identifier"),
        ([["y", "out", "float*", [1.5]], ["s", "stream"]], "neither a dims name nor an integer"),
    ],
)  # fmt: skip
def test_a_malformed_arg_spec_is_a_bad_request_saying_what_is_wrong(
    data: object, message: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        sv.parse_arg_spec(data)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({}, "no value for the scalar parameter 'n'"),
        ({"n": 1.5}, "needs an integer"),
        ({"n": "8"}, "not a number"),
        ({"n": True}, "not a number"),
        ({"n": 2**31}, "does not fit int32"),
        ({"n": 0}, "shape 'n': 0 is not a positive int"),
    ],
)
def test_dims_that_do_not_fit_the_spec_are_refused(dims: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        sv.parse_arg_spec(SPEC).check_dims(dims)
    assert message in caught.value.message


def test_shape_expressions_are_integer_arithmetic_over_the_dims_only() -> None:
    assert sv.eval_dims("(n + 3) // 4 * 2 - n % 3", {"n": 10}) == 5
    for expression, message in [("n / 2", "not allowed"), ("__import__('os')", "not allowed"),
                                ("m", "'m' is not an integer"), ("n // 0", "divides by zero"),
                                ("n +", "not an expression"), ("1.5", "not allowed")]:  # fmt: skip
        with pytest.raises(BadRequest, match=message):
            sv.eval_dims(expression, {"n": 10})


def test_a_shape_naming_an_unknown_dim_is_refused() -> None:
    spec = sv.parse_arg_spec([["y", "out", "float*", ["m"]], ["s", "stream"]])
    with pytest.raises(BadRequest, match="buffer 'y'"):
        spec.shapes({"n": 4})


def test_the_solve_signature_is_parsed_from_the_source_not_from_comments() -> None:
    params = sv.parse_solve_signature(SOURCE)
    assert params == [
        ("const float*", "x"),
        ("float*", "y"),
        ("int", "n"),
        ("cudaStream_t", "stream"),
    ]
    sv.check_signature(sv.parse_arg_spec(SPEC), SOURCE)  # matches: no error


def test_a_global_kernel_is_not_a_host_solve_entry() -> None:
    kernel = 'extern "C" __global__ void solve(const float* x, float* y, int n) {}'
    assert not sv.has_solve_entry(kernel)
    assert sv.has_solve_entry(SOURCE)
    with pytest.raises(BadRequest, match='no host function extern "C" void solve'):
        sv.parse_solve_signature(kernel)


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        ("float* x, float* y, int n, cudaStream_t stream", "x: `float*` in the source is out"),
        ("const double* x, float* y, int n, cudaStream_t stream", "float64"),
        ("const float* x, float* y, long long n, cudaStream_t stream", "int64"),
        ("const float* x, float* y, int n", "parameters are (x, y, n)"),
        ("float* y, const float* x, int n, cudaStream_t stream", "parameters are (y, x, n, stream)"),
    ],
)  # fmt: skip
def test_a_spec_that_does_not_match_the_signature_is_refused(signature: str, message: str) -> None:
    source = f'extern "C" void solve({signature}) {{}}'
    with pytest.raises(BadRequest) as caught:
        sv.check_signature(sv.parse_arg_spec(SPEC), source)
    assert message in caught.value.message


def test_a_spec_from_the_signature_needs_every_buffer_shape() -> None:
    assert sv.spec_from_signature(SOURCE, {"x": ["n"], "y": ["n"]}) == sv.parse_arg_spec(SPEC)
    with pytest.raises(BadRequest, match="no shape for the buffer 'y'"):
        sv.spec_from_signature(SOURCE, {"x": ["n"]})


def test_nvcc_command_line() -> None:
    argv = sv.nvcc_argv(Path("k.cu"), Path("out/k.so"), arch="sm_90a", nvcc="/opt/nvcc",
                        include_dirs=["/inc"], extra_flags=["-DTILE=64"])  # fmt: skip
    assert argv[0] == "/opt/nvcc" and argv[-3:] == ["-o", "out/k.so", "k.cu"]
    for flag in ("-shared", "-fPIC", "-O3", "-std=c++17", "-arch=sm_90a", "-I/inc", "-DTILE=64"):
        assert flag in argv
    assert argv[argv.index("-Xcompiler") + 1] == "-fPIC"
    assert argv[argv.index("-Xptxas") + 1] == "-v"  # the ptxas report is kept as evidence
    assert argv.index("-I/inc") < argv.index("-DTILE=64")  # the user's flags come last
    with pytest.raises(BadRequest, match="not a CUDA architecture"):
        sv.nvcc_argv(Path("k.cu"), Path("k.so"), arch="90")


# ------------------------------------------------------------------------------- ref.py


def _ref(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ref.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", "defines no callable reference"),
        ("reference = 3\n", "defines no callable reference"),
        ("import no_such_module_here\ndef reference(**kw): pass\n", "failed to load: ModuleNotFoundError"),
        ("ARRAYS = 'jax'\ndef reference(**kw): pass\n", "ARRAYS is 'jax'"),
        ("TOLERANCES = {'y': 'tight'}\ndef reference(**kw): pass\n", "TOLERANCES"),
        ("make_inputs = 4\ndef reference(**kw): pass\n", "make_inputs must be a function"),
        ("FLOPS_UNIT = 'tensor_fp3'\ndef reference(**kw): pass\n", "FLOPS_UNIT is 'tensor_fp3'"),
    ],
)  # fmt: skip
def test_a_ref_py_breaking_the_contract_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        sv.load_ref(_ref(tmp_path, text))
    assert message in caught.value.message


def test_ref_py_declarations_are_read(tmp_path: Path) -> None:
    ref = sv.load_ref(_ref(tmp_path, f"ARGS = {SPEC!r}\nARRAYS = 'numpy'\nFLOPS_UNIT = 'cuda_fp32'\n"
                                      "TOLERANCES = {'y': 1e-3}\ndef reference(x, n): return 2 * x\n"))  # fmt: skip
    assert ref.arrays == "numpy" and ref.flops_unit == "cuda_fp32" and ref.tolerances == {"y": 1e-3}
    assert sv.resolve_spec(ref, SOURCE) == sv.parse_arg_spec(SPEC)
    assert (
        sv.resolve_spec(ref, None, [*SPEC["args"][:2], ["n", "int"], ["s", "stream"]]).args[3].name
        == "s"
    )


def test_ref_py_without_args_or_shapes_is_refused(tmp_path: Path) -> None:
    ref = sv.load_ref(_ref(tmp_path, "def reference(**kw): pass\n"))
    with pytest.raises(BadRequest, match="neither ARGS"):
        sv.resolve_spec(ref, SOURCE)
    shaped = sv.load_ref(
        _ref(tmp_path, "SHAPES = {'x': ['n'], 'y': ['n']}\ndef reference(**kw): pass\n")
    )
    assert sv.resolve_spec(shaped, SOURCE) == sv.parse_arg_spec(SPEC)


def test_a_json_spec_breaking_the_contract_is_refused_before_anything_is_built(
    tmp_path: Path,
) -> None:
    (tmp_path / "ref.py").write_text(f"ARGS = {SPEC!r}\ndef reference(x, n): return 2 * x\n")
    (tmp_path / "v0.cu").write_text(SOURCE)
    (tmp_path / "v1.cu").write_text(SOURCE.replace("const float* __restrict__ x", "float* x"))
    spec = tmp_path / "spec.json"
    cases = [
        ("{", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"ref": "ref.py", "reference": "v0.cu"}', "missing keys ['dims']"),
        ('{"ref": "ref.py", "reference": "v0.cu", "dims": {"n": 8}, "speed": 1}', "unknown keys"),
        ('{"ref": "ref.py", "reference": "nope.cu", "dims": {"n": 8}}', "no file"),
        ('{"ref": "ref.py", "reference": "v0.cu", "candidate": "v1.cu", "dims": {"n": 8}}',
         "candidate v1.cu: the argument spec does not match"),
        ('{"ref": "ref.py", "reference": "v0.cu", "dims": {"m": 8}}', "no value for the scalar"),
        ('{"ref": "ref.py", "reference": "v0.cu", "dims": {"n": 8}, "arch": "volta"}', "arch"),
    ]  # fmt: skip
    for text, message in cases:
        spec.write_text(text)
        with pytest.raises(BadRequest) as caught:
            sv.load_solve_spec(spec)
        assert message in caught.value.message, (text, caught.value.message)


# ------------------------------------------------------------------------- a real build


@pytest.mark.slow
@needs_nvcc
def test_a_host_only_solve_is_built_by_nvcc_and_called_through_ctypes(tmp_path: Path) -> None:
    source = tmp_path / "double.cu"
    source.write_text(SOURCE)
    cache = tmp_path / "cache"
    build = sv.build_solve(source, arch="sm_90", cache_dir=cache)
    assert build.library.is_file() and build.arch == "sm_90"
    assert build.library_blake3 == sv.file_hash(build.library)
    assert build.sources == {"double.cu": sv.file_hash(source)}
    assert "-arch=sm_90" in build.argv and build.nvcc_version.count(".") == 2
    spec = sv.parse_arg_spec(SPEC)
    subject = sv.SolveSubject("double", build, spec, {"n": 5}, stream_ptr=lambda: 0)
    x = np.arange(5, dtype=np.float32)
    y = np.full(5, np.nan, dtype=np.float32)
    subject({"x": x}, {"y": y})  # host pointers: the host-only solve writes y
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    identity = subject.identity()
    assert (
        identity["library_blake3"] == build.library_blake3
        and identity["args"] == spec.to_json()["args"]
    )
    # the same sources, flags and nvcc: the library built before is reused, not rebuilt
    again = sv.build_solve(source, arch="sm_90", cache_dir=cache)
    assert again.library == build.library and again.library_blake3 == build.library_blake3
    # another source: another library, another identity
    source.write_text(SOURCE.replace("2.0f", "3.0f"))
    other = sv.build_solve(source, arch="sm_90", cache_dir=cache)
    assert other.library != build.library
    changed = sv.SolveSubject("triple", other, spec, {"n": 5}, stream_ptr=lambda: 0)
    assert changed.content_hash() != subject.content_hash()


@pytest.mark.slow
@needs_nvcc
def test_a_library_without_an_unmangled_solve_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "mangled.cu"
    source.write_text("void solve(const float* x, float* y, int n, void* stream) {}\n")
    build = sv.build_solve(source, arch="sm_90", cache_dir=tmp_path / "cache")
    assert ctypes.CDLL(str(build.library))  # it loads; it just exports no "solve"
    with pytest.raises(BadRequest, match="exports no callable solve"):
        sv.SolveSubject("mangled", build, sv.parse_arg_spec(SPEC), {"n": 1})


@pytest.mark.slow
@needs_nvcc
def test_a_source_that_does_not_compile_is_a_bad_request_with_nvcc_s_message(
    tmp_path: Path,
) -> None:
    source = tmp_path / "broken.cu"
    source.write_text(
        'extern "C" void solve(const float* x, float* y, int n, cudaStream_t s) { oops; }\n'
    )
    with pytest.raises(BadRequest) as caught:
        sv.build_solve(source, arch="sm_90", cache_dir=tmp_path / "cache")
    assert "nvcc failed on broken.cu" in caught.value.message
    assert "oops" in (caught.value.hint or "")
    assert not list((tmp_path / "cache").rglob("*.so"))  # no half-built library is left


def test_data_pointers_of_host_arrays_and_refusal_of_strided_ones() -> None:
    a = np.zeros((4, 4), dtype=np.float32)
    assert sv.data_ptr(a) == a.ctypes.data
    with pytest.raises(BadRequest, match="C-contiguous"):
        sv.data_ptr(a[:, 1])
    with pytest.raises(BadRequest, match="not an array"):
        sv.data_ptr([1.0, 2.0])


def test_const_before_the_star_makes_an_input_and_after_it_does_not() -> None:
    source = 'extern "C" void solve(const float* const x, float* const y, int n, cudaStream_t s) {}'
    kinds = [solve_args._describe(ctype)[0] for ctype, _ in sv.parse_solve_signature(source)]
    assert kinds == ["in", "out", "scalar", "stream"]


def test_the_loop_backend_takes_the_spec_from_the_baseline_when_ref_py_gives_shapes(
    tmp_path: Path,
) -> None:
    from perfledger.kernels.loop.solve import SolveBackend

    ref = _ref(tmp_path, "SHAPES = {'x': ['n'], 'y': ['n']}\ndef reference(x, n): return 2 * x\n")
    baseline = tmp_path / "v0.cu"
    baseline.write_text(SOURCE)
    backend = SolveBackend(ref, {"n": 8}, source=baseline)
    assert backend._contract()[1] == sv.parse_arg_spec(SPEC)
    with pytest.raises(BadRequest, match="neither ARGS"):
        SolveBackend(ref, {"n": 8})._contract()


def test_a_problem_from_ref_py_declares_work_from_the_dims_and_refuses_a_broken_declaration(
    tmp_path: Path,
) -> None:
    ref = sv.load_ref(_ref(tmp_path, f"ARGS = {SPEC!r}\nFLOPS_UNIT = 'cuda_fp32'\n"
                                      "def reference(x, n): return 2 * x\n"
                                      "def bytes_per_call(n): return 8 * n\n"
                                      "def flops_per_call(n, **rest): return n\n"))  # fmt: skip
    problem = sv.solve_problem(ref, {"n": 1000}, sv.parse_arg_spec(SPEC))
    assert (problem.bytes_per_call, problem.flops_per_call) == (8000, 1000)
    assert problem.outputs == {"y": ((1000,), "float32")} and problem.flops_unit == "cuda_fp32"
    broken = sv.load_ref(_ref(tmp_path, f"ARGS = {SPEC!r}\ndef reference(x, n): return 2 * x\n"
                                         "def bytes_per_call(n): return n / 3\n"))  # fmt: skip
    with pytest.raises(BadRequest, match="bytes_per_call"):
        sv.solve_problem(broken, {"n": 1000}, sv.parse_arg_spec(SPEC))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def solve(x, y, n, stream):\n    pass\n", "solve(x, y, n, stream) in the subject"),
        ("def kernel(x, y, n):\n    pass\n", "defines no top-level def solve"),
        ("def solve(x, y, n:\n", "not valid Python"),
    ],
)
def test_a_python_solve_whose_parameters_are_not_the_spec_s_is_refused(
    text: str, message: str
) -> None:
    from perfledger.kernels.subjects.torch_subject import check_python_solve

    with pytest.raises(BadRequest) as caught:
        check_python_solve(text, sv.parse_arg_spec(SPEC))
    assert message in caught.value.message


def test_a_python_solve_subject_is_identified_by_its_text_and_a_broken_one_refused(
    tmp_path: Path,
) -> None:
    from perfledger.kernels.subjects.torch_subject import python_solve_subject

    good = tmp_path / "good.py"
    good.write_text("CALLS = []\ndef solve(x, y, n):\n    CALLS.append(n)\n")
    subject = python_solve_subject(good, sv.parse_arg_spec(SPEC), {"n": 3})
    other = tmp_path / "other.py"
    other.write_text("def solve(x, y, n):\n    pass\n")
    assert subject.content_hash() != python_solve_subject(other, sv.parse_arg_spec(SPEC),
                                                          {"n": 3}).content_hash()  # fmt: skip
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\ndef solve(x, y, n):\n    pass\n")
    with pytest.raises(BadRequest, match=r"broken\.py failed to load: ModuleNotFoundError"):
        python_solve_subject(broken, sv.parse_arg_spec(SPEC), {"n": 3})
