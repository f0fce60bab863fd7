"""Regressions found by round 32 of the differential fuzzer (``tests/test_fuzz32.py``): the
``nn.Module`` and container API against torch 2.13. Expected behaviour is torch's."""

import pytest

import retrograd as rg

nn = rg.nn


def test_deleting_a_plain_attribute_of_a_module():
    # torch: ``m.cache = None; del m.cache`` works; retrograd dropped the attribute from the
    # instance dict and then raised AttributeError for it
    m = nn.Linear(2, 2)
    m.cache = None
    m.counter = 3
    del m.cache
    del m.counter
    assert not hasattr(m, "cache") and not hasattr(m, "counter")
    with pytest.raises(AttributeError):
        del m.counter


@pytest.mark.parametrize("name", ["", "a.b"])
def test_a_parameter_assigned_under_a_name_no_key_can_reach(name):
    # torch: KeyError "parameter name can't be empty string" / "can't contain '.'"
    m = nn.Linear(2, 2)
    with pytest.raises(KeyError) as caught:
        setattr(m, name, nn.Parameter(rg.zeros(1)))
    assert isinstance(caught.value, rg.RetrogradError)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]


@pytest.mark.parametrize(
    "getter, path",
    [
        ("get_parameter", "nothing"),
        ("get_parameter", "0.weight"),
        ("get_buffer", "weight"),
        ("get_buffer", "lin.running_mean"),
        ("get_parameter", ""),
    ],
)
def test_get_parameter_and_get_buffer_of_a_missing_name_raise_attribute_error(getter, path):
    # torch raises AttributeError ("Linear has no attribute `nothing`", "`weight` is not a
    # buffer"); retrograd's KeyError escaped ``except AttributeError``
    model = nn.Sequential()
    model.lin = nn.Linear(2, 2)
    model.bn = nn.BatchNorm1d(2)
    target = model if "." in path or not path else model.lin
    with pytest.raises(AttributeError) as caught:
        getattr(target, getter)(path)
    assert isinstance(caught.value, rg.RetrogradError)
    assert isinstance(caught.value, KeyError)  # what retrograd raised before still catches it


def test_parameter_dict_missing_key_and_pop():
    # torch: ParameterDict lookups are getattr's (AttributeError), and it has ``pop``
    pd = nn.ParameterDict({"p": nn.Parameter(rg.ones(2)), "q": nn.Parameter(rg.zeros(1))})
    with pytest.raises(AttributeError) as caught:
        pd["missing"]
    assert isinstance(caught.value, rg.RetrogradError)
    p = pd["p"]
    assert pd.pop("p") is p
    assert list(pd.keys()) == ["q"]
    assert [n for n, _ in pd.named_parameters()] == ["q"]
    with pytest.raises(AttributeError):
        pd.pop("p")
    assert list(pd.keys()) == ["q"]


@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_of_a_wrong_shape_raises_runtime_error(strict):
    # torch: RuntimeError "size mismatch for weight" (strict or not); retrograd's ShapeError
    # (a ValueError) escaped the ``except RuntimeError`` fallbacks written for torch
    m = nn.Linear(2, 3)
    state = {"weight": rg.zeros(4, 5), "bias": rg.zeros(3)}
    before = m.weight.detach().numpy().copy()
    with pytest.raises(RuntimeError) as caught:
        m.load_state_dict(state, strict=strict)
    assert isinstance(caught.value, rg.ShapeError)
    assert (m.weight.detach().numpy() == before).all()


@pytest.mark.parametrize("container", ["Sequential", "ModuleList"])
def test_append_refuses_a_number_already_taken_by_a_buffer(container):
    # torch: KeyError "attribute '1' already exists"; retrograd registered a module '1' beside
    # the buffer '1', one name in two registries
    box = nn.Sequential(nn.ReLU()) if container == "Sequential" else nn.ModuleList([nn.ReLU()])
    box.register_buffer("1", rg.zeros(1))
    with pytest.raises(KeyError) as caught:
        box.append(nn.Tanh())
    assert isinstance(caught.value, rg.RetrogradError)
    with pytest.raises(KeyError):
        box.extend([nn.Tanh()])
    assert list(box._modules) == ["0"] and list(box._buffers) == ["1"]


def test_get_parameter_of_a_name_registered_as_none():
    # torch: AttributeError "`bias` is not an nn.Parameter"; retrograd returned None
    m = nn.Linear(2, 2, bias=False)
    with pytest.raises(AttributeError) as caught:
        m.get_parameter("bias")
    assert isinstance(caught.value, rg.RetrogradError)
    m.register_buffer("stat", None)
    assert m.get_buffer("stat") is None  # torch's get_buffer returns a None buffer
