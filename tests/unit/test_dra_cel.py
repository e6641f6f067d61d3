"""DRA device selectors in CEL (kaisched.model.dra_cel)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from kaisched.model import dra_cel
from kaisched.model.dra_cel import CelError, DeviceView, compile_selector

GI = 2**30
NV = "gpu.nvidia.com"


def gpu(product: str = "NVIDIA A100-SXM4-80GB", index: int = 0, memory: float = 80 * GI, mig: bool = False,
        driver_version: str = "550.54.15", kind: str = "gpu",
        extra: Mapping[str, tuple[str, bool | int | str]] | None = None) -> DeviceView:
    attributes: dict[str, tuple[str, bool | int | str]] = {
        f"{NV}/productName": ("string", product),
        f"{NV}/index": ("int", index),
        f"{NV}/type": ("string", kind),
        f"{NV}/mig": ("bool", mig),
        f"{NV}/driverVersion": ("version", driver_version),
    }
    attributes.update(extra or {})
    return DeviceView(driver=NV, attributes=attributes, capacity={f"{NV}/memory": float(memory)})


def example(model: str) -> DeviceView:
    return DeviceView(driver="dra.example.com", attributes={"dra.example.com/model": ("string", model)},
                      capacity={"dra.example.com/modules": 4.0})


def matches(expression: str, device: DeviceView) -> bool:
    return compile_selector(expression).matches(device)


# ----------------------------------------------------------------------- the expressions users write

CASES = [
    ('device.driver == "gpu.nvidia.com"', gpu(), example("A100")),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"', gpu(), gpu("NVIDIA H100 80GB HBM3")),
    ('device.attributes["gpu.nvidia.com"].index < 4', gpu(index=3), gpu(index=4)),
    ('device.attributes["gpu.nvidia.com"].type == "gpu" && device.attributes["gpu.nvidia.com"].mig == false',
     gpu(), gpu(mig=True)),
    ('device.attributes["gpu.nvidia.com"].type == "gpu" && device.attributes["gpu.nvidia.com"].mig == false',
     gpu(), gpu(kind="mig")),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', gpu(memory=40 * GI),
     gpu(memory=40 * GI - 1)),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("10Gi"))', gpu(memory=10 * GI + 1),
     gpu(memory=10 * GI)),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
     gpu(driver_version="550.0.1"), gpu(driver_version="550.0.0")),
    ('semver("550.0.0").compareTo(device.attributes["gpu.nvidia.com"].driverVersion) < 0',
     gpu(driver_version="550.54.15"), gpu(driver_version="535.161.8")),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isLessThan(semver("550.0.0"))',
     gpu(driver_version="535.161.8"), gpu(driver_version="550.0.0")),
    ('"gpu.nvidia.com" in device.attributes && device.attributes["gpu.nvidia.com"].?productName.orValue("") != ""',
     gpu(), example("A100")),
    ('"gpu.nvidia.com" in device.attributes && device.attributes["gpu.nvidia.com"].?productName.orValue("") != ""',
     gpu(), gpu(product="")),
    ('device.attributes["dra.example.com"].model.startsWith("A")', example("A100"), example("H100")),
    ('device.attributes["dra.example.com"].model.matches("A1.*")', example("A100"), example("A200")),
]


@pytest.mark.parametrize(("expression", "true_on", "false_on"), CASES)
def test_expression_true_and_false(expression: str, true_on: DeviceView, false_on: DeviceView) -> None:
    selector = compile_selector(expression)
    assert selector.expression == expression
    assert selector.matches(true_on) is True
    assert selector.matches(false_on) is False


# ------------------------------------------------------------------------------------------- errors


def test_missing_attribute_is_a_runtime_error() -> None:
    selector = compile_selector('device.attributes["gpu.nvidia.com"].serial == "x"')
    with pytest.raises(CelError, match="no such key: serial") as caught:
        selector.matches(gpu())
    assert 'CEL expression "device.attributes["gpu.nvidia.com"].serial == "x""' in str(caught.value)


def test_attribute_of_a_missing_domain_is_a_runtime_error() -> None:
    # an unknown domain is an empty map (as in Kubernetes), so the attribute is what is missing
    with pytest.raises(CelError, match="no such key: productName"):
        matches('device.attributes["gpu.nvidia.com"].productName == "x"', example("A100"))
    with pytest.raises(CelError, match="no such key: memory"):
        matches('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1")) > 0', example("A100"))


def test_a_computed_missing_domain_is_a_runtime_error() -> None:
    with pytest.raises(CelError, match=re.escape("no such key: gpu.nvidia.com")):
        matches('device.attributes["gpu." + "nvidia.com"].index == 0', example("A100"))


def test_unknown_domain_is_an_empty_map() -> None:
    device = example("A100")
    assert matches('!has(device.attributes["gpu.nvidia.com"].productName)', device)
    assert matches('size(device.attributes["gpu.nvidia.com"]) == 0', device)
    assert matches('size(device.capacity["gpu.nvidia.com"]) == 0', device)
    assert not matches('"gpu.nvidia.com" in device.attributes', device)
    assert matches('"dra.example.com" in device.attributes', device)
    assert matches('has(device.attributes["gpu.nvidia.com"].productName)', gpu())


def test_syntax_error_names_the_expression_and_the_place() -> None:
    with pytest.raises(CelError) as caught:
        compile_selector("x ==")
    message = str(caught.value)
    assert message.startswith('CEL expression "x ==": syntax error at line 1, column 5: ')
    assert "\n" not in message


def test_syntax_error_position_is_the_users_when_optional_syntax_was_rewritten() -> None:
    expression = 'device.attributes["gpu.nvidia.com"].?productName =='
    with pytest.raises(CelError, match=f"syntax error at line 1, column {len(expression) + 1}: mismatched input"):
        compile_selector(expression)


def test_compile_errors_are_cached_and_raised_again() -> None:
    for _ in range(2):
        with pytest.raises(CelError, match="syntax error"):
            compile_selector("device.driver ==")


def test_non_bool_result_is_an_error() -> None:
    with pytest.raises(CelError, match=re.escape('CEL expression "device.driver": must evaluate to bool, got string')):
        matches("device.driver", gpu())
    with pytest.raises(CelError, match="must evaluate to bool, got int"):
        matches('device.attributes["gpu.nvidia.com"].index', gpu())


def test_errors_short_circuit_as_in_cel() -> None:
    assert not matches('false && device.attributes["gpu.nvidia.com"].serial == "x"', gpu())
    assert not matches('device.attributes["gpu.nvidia.com"].serial == "x" && false', gpu())
    assert matches('true || device.attributes["gpu.nvidia.com"].serial == "x"', gpu())


def test_unknown_function_and_wrong_types_are_errors() -> None:
    with pytest.raises(CelError, match="nosuch"):
        matches("nosuch(1)", gpu())
    with pytest.raises(CelError, match=re.escape("compareTo: no such overload: int.compareTo")):
        matches('device.attributes["gpu.nvidia.com"].index.compareTo(quantity("1")) == 0', gpu())
    with pytest.raises(CelError, match="compares two quantities or two versions"):
        matches('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(semver("1.0.0"))', gpu())


def test_invalid_quantity_and_version_literals_are_errors() -> None:
    with pytest.raises(CelError, match="quantity: invalid quantity '40Gx'"):
        matches('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gx"))', gpu())
    with pytest.raises(CelError, match="semver: '550' is not a semantic version"):
        matches('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550"))', gpu())


def test_invalid_version_attribute_is_an_error() -> None:
    message = "device attribute gpu.nvidia.com/driverVersion: '550.x' is not a semantic version"
    with pytest.raises(CelError, match=re.escape(message)):
        matches('device.driver == "gpu.nvidia.com"', gpu(driver_version="550.x"))


def test_messages_are_one_line() -> None:
    multi_line = 'device.attributes["gpu.nvidia.com"].index >= 0 &&\n  device.attributes["gpu.nvidia.com"].serial == ""'
    with pytest.raises(CelError) as caught:
        matches(multi_line, gpu())
    assert "\n" not in str(caught.value)
    assert str(caught.value).endswith("no such key: serial")


# ---------------------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("memory", "literal", "compare"),
    [
        (40 * GI, "40Gi", 0),
        (40 * GI, "42949672960", 0),
        (40 * GI - 1, "40Gi", -1),
        (40 * GI + 1, "40Gi", 1),
        (40 * GI, "40G", 1),  # decimal G is less than binary Gi
        (40e9, "40G", 0),
        (0.1, "100m", 0),
        (0.0, "0", 0),
        (1.0, "1e3", -1),
        (1e18, "1E", 0),  # exa
    ],
)
def test_quantity_comparisons_at_their_edges(memory: float, literal: str, compare: int) -> None:
    device = gpu(memory=memory)
    q = 'device.capacity["gpu.nvidia.com"].memory'
    assert matches(f'{q}.compareTo(quantity("{literal}")) == {compare}', device)
    assert matches(f'{q}.isGreaterThan(quantity("{literal}")) == {str(compare > 0).lower()}', device)
    assert matches(f'{q}.isLessThan(quantity("{literal}")) == {str(compare < 0).lower()}', device)
    # the same with the literal computed at evaluation (not folded when compiling)
    assert matches(f'{q}.compareTo(quantity("{literal}" + "")) == {compare}', device)


def test_quantity_functions() -> None:
    device = gpu(memory=40 * GI)
    q = 'device.capacity["gpu.nvidia.com"].memory'
    assert matches(f'{q}.add(quantity("1Gi")).compareTo(quantity("41Gi")) == 0', device)
    assert matches(f'{q}.sub(1).compareTo(quantity("40Gi")) < 0', device)
    assert matches(f"{q}.isInteger() && {q}.asInteger() == 42949672960 && {q}.sign() == 1", device)
    assert matches(f"{q}.asApproximateFloat() == 42949672960.0", device)
    assert matches('isQuantity("1.5Gi") && !isQuantity("1.5GB")', device)
    assert matches('quantity("-1").sign() == -1 && !quantity("100m").isInteger()', device)
    with pytest.raises(CelError, match=re.escape("asInteger: quantity 0.1 is not an integer")):
        matches('quantity("100m").asInteger() == 0', device)


# ------------------------------------------------------------------------------------------ versions


@pytest.mark.parametrize(
    ("version", "literal", "compare"),
    [
        ("550.54.15", "550.54.15", 0),
        ("550.54.15+build.7", "550.54.15", 0),  # build metadata does not count
        ("550.10.0", "550.9.0", 1),  # numerically, not as text
        ("550.0.0-rc.1", "550.0.0", -1),  # a pre-release precedes its release
        ("1.0.0-rc.2", "1.0.0-rc.10", -1),  # numeric identifiers numerically
        ("1.0.0-1", "1.0.0-alpha", -1),  # numeric before alphanumeric
        ("1.0.0-alpha", "1.0.0-alpha.1", -1),  # fewer identifiers first
        ("1.0.0-alpha.beta", "1.0.0-beta", -1),
        ("2.0.0", "10.0.0", -1),
        ("0.0.1", "0.0.0", 1),
    ],
)
def test_semver_comparisons_at_their_edges(version: str, literal: str, compare: int) -> None:
    device = gpu(driver_version=version)
    v = 'device.attributes["gpu.nvidia.com"].driverVersion'
    assert matches(f'{v}.compareTo(semver("{literal}")) == {compare}', device)
    assert matches(f'semver("{literal}").compareTo({v}) == {-compare}', device)
    assert matches(f'{v}.isGreaterThan(semver("{literal}")) == {str(compare > 0).lower()}', device)
    assert matches(f'{v}.isLessThan(semver("{literal}")) == {str(compare < 0).lower()}', device)
    assert matches(f'({v} == semver("{literal}")) == {str(compare == 0).lower()}', device)
    assert matches(f'{v}.compareTo(semver("{literal}" + "")) == {compare}', device)  # evaluated, not folded


def test_semver_functions() -> None:
    device = gpu(driver_version="550.54.15")
    v = 'device.attributes["gpu.nvidia.com"].driverVersion'
    assert matches(f"{v}.major() == 550 && {v}.minor() == 54 && {v}.patch() == 15", device)
    assert matches('isSemver("1.2.3-rc.1+b") && !isSemver("1.2") && !isSemver("01.2.3") && isSemver("v1.2", true)',
                   device)
    assert matches('semver("v550.54", true) == semver("550.54.0")', device)
    assert matches(f'{v}.isGreaterThan(semver("v550", true))', device)


# ------------------------------------------------------------------------------------ other syntax


def test_optional_field_and_index() -> None:
    device = gpu()
    assert matches('device.attributes["gpu.nvidia.com"].?serial.orValue("none") == "none"', device)
    assert matches('device.attributes["gpu.nvidia.com"].?index.hasValue()', device)
    assert matches('!device.attributes["gpu.nvidia.com"].?serial.hasValue()', device)
    assert matches('device.attributes["gpu.nvidia.com"].?serial.?x.orValue(1) == 1', device)  # chained
    assert matches('device.attributes["gpu.nvidia.com"][?"index"].value() == 0', device)
    assert matches('device.attributes["gpu.nvidia.com"][?"serial"].orValue(7) == 7', device)
    assert matches('device.attributes["dra.example.com"].?model.or(optional.of("x")).value() == "x"', device)
    # the receiver is not a domain map: evaluated through a function
    assert matches('cel.bind(m, device.attributes["gpu.nvidia.com"], m.?type.orValue("") == "gpu")', device)
    assert matches('[{"a": 1}][0].?a.orValue(0) == 1 && [1, 2][?5].orValue(0) == 0', device)


def test_optional_list_and_map_entries_are_unsupported() -> None:
    with pytest.raises(CelError, match="syntax error"):
        compile_selector("[?optional.none()] == []")


def test_cel_bind() -> None:
    expression = ('cel.bind(nv, device.attributes["gpu.nvidia.com"], nv.type == "gpu" && '
                  'cel.bind(i, nv.index, i >= 0 && i < 4))')
    assert matches(expression, gpu(index=3))
    assert not matches(expression, gpu(index=4))
    with pytest.raises(CelError, match=re.escape("cel.bind takes a variable name, a value and an expression")):
        compile_selector("cel.bind(x, 1)")


def test_text_in_string_literals_and_comments_is_not_rewritten() -> None:
    device = DeviceView(driver='device.attributes["a"].?b', attributes={}, capacity={})
    assert matches("device.driver == 'device.attributes[\"a\"].?b'", device)
    assert matches("device.driver == r'device.attributes[\"a\"].?b'", device)
    assert matches(r'"device.attributes[\"a\"].?b" == device.driver && r"\n".size() == 2', device)
    assert matches('device.driver.size() > 0 // device.attributes["x"].?y quantity("1")', device)
    assert matches('"""quantity("1") semver("1.0.0")""".startsWith("quantity")', device)


def test_attribute_names_without_a_domain_are_the_drivers() -> None:
    device = DeviceView(driver="dra.example.com", attributes={"model": ("string", "A100")}, capacity={"modules": 4.0})
    assert matches('device.attributes["dra.example.com"].model == "A100"', device)
    assert matches('device.capacity["dra.example.com"].modules.compareTo(quantity("4")) == 0', device)


def test_several_domains_and_macros() -> None:
    device = gpu(extra={"dra.example.com/model": ("string", "A100")})
    assert matches('device.attributes["dra.example.com"].model == "A100" && '
                   'device.attributes["gpu.nvidia.com"].index == 0', device)
    assert matches('device.attributes.exists(d, d == "dra.example.com")', device)
    assert matches('device.attributes["gpu.nvidia.com"].all(k, k.size() > 0)', device)
    assert matches('device.attributes[device.driver].index == 0', device)


def test_strings_extension() -> None:
    device = gpu()
    assert matches('device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("a100")', device)
    assert matches('device.attributes["gpu.nvidia.com"].productName.split("-")[0] == "NVIDIA A100"', device)
    assert matches('device.driver.indexOf("nvidia") == 4 && [3, 1, 2].max() == 3', device)


# ------------------------------------------------------------------------------- caching and batches


def test_compiled_selectors_are_cached_by_text() -> None:
    text = 'device.driver == "gpu.nvidia.com" && true'
    assert compile_selector(text) is compile_selector(text)


def test_matches_all_gives_one_entry_per_device() -> None:
    selector = compile_selector('device.attributes["gpu.nvidia.com"].index < 2')
    results = selector.matches_all([gpu(index=1), gpu(index=2), example("A100")])
    assert results[:2] == [True, False]
    assert isinstance(results[2], CelError)
    assert "no such key: index" in str(results[2])


@pytest.mark.interpreted
def test_a_device_is_converted_once_and_an_equal_one_reuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[DeviceView] = []
    build = dra_cel._build_context

    def counting(device: DeviceView) -> object:
        built.append(device)
        return build(device)

    monkeypatch.setattr(dra_cel, "_build_context", counting)
    device = gpu(index=5, product="counted")
    selectors = [compile_selector('device.attributes["gpu.nvidia.com"].index == 5'),
                 compile_selector('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("1Gi"))'),
                 compile_selector('device.attributes["gpu.nvidia.com"].productName.lowerAscii() == "counted"')]
    for _ in range(3):
        assert all(s.matches(device) for s in selectors)
    assert all(s.matches(gpu(index=5, product="counted")) for s in selectors)  # equal content, new view
    assert built == [device]
    assert not selectors[0].matches(gpu(index=6, product="counted"))
    assert len(built) == 2


def test_attribute_values_must_be_of_their_kind() -> None:
    selector = compile_selector('device.driver == "x"')
    with pytest.raises(CelError, match="device attribute x/a: 1 is not of its kind, bool"):
        selector.matches(DeviceView(driver="x", attributes={"x/a": ("bool", 1)}, capacity={}))
    with pytest.raises(CelError, match="unknown kind 'float'"):
        selector.matches(DeviceView(driver="x", attributes={"x/a": ("float", 1)}, capacity={}))
