

# torch's ``t[basic] = v`` (``copy_to``): a 0-d value is a fill, one of the target's shape is
# copied as it is; neither refused when it is the target's own region (torch 2.13 runs each)
def test_setitem_of_the_targets_own_values_runs_as_torch():
    x = rg.arange(12.0).reshape(3, 4) * 1.0
    x[2, 0::3] += rg.ones(1)  # x[2, 0::3] = (its own values + 1)
    x[2:3, 0::3] += 1
    x[1, 0:1] = x[1, 0:1].reshape(())
    np.testing.assert_array_equal(x.numpy()[2], [10.0, 9.0, 10.0, 13.0])
    np.testing.assert_array_equal(x.numpy()[1], [4.0, 5.0, 6.0, 7.0])


def test_copy_from_the_same_region_in_another_shape_is_refused_as_torch():
    x = rg.arange(12.0)
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        x[0:1].copy_(x[0:1].view(()))
    with pytest.raises(rg.InvalidArgumentError, match=OVERLAP):
        x[0:4].view(2, 2).copy_(x[0:4].view(4))


# torch 2.13's ``torch.add(number, tensor)`` and the other number-first functions: the number
# is a wrapped number, weaker than a 0-d tensor of a narrow integer dtype, and wrapped into its
# range (each (dtype, value) printed by torch)
@pytest.mark.parametrize(
    ("call", "dtype", "value"),
    [
        (lambda u, v: rg.add(300, u), "uint8", 47),
        (lambda u, v: rg.add(3, u, alpha=2), "uint8", 9),
        (lambda u, v: rg.sub(300, u), "uint8", 41),
        (lambda u, v: rg.add(-1, u), "uint8", 2),
        (lambda u, v: rg.remainder(7, u), "uint8", 1),
        (lambda u, v: rg.floor_divide(7, u), "uint8", 2),
        (lambda u, v: rg.div(7, u, rounding_mode="floor"), "uint8", 2),
        (lambda u, v: rg.bitwise_left_shift(1, u), "uint8", 8),
        (lambda u, v: rg.bitwise_and(259, u), "uint8", 3),
        (lambda u, v: rg.add(3, v), "int32", 4),
        (lambda u, v: rg.mul(2, v), "int32", 2),
        (lambda u, v: rg.div(300, u), "float32", 100.0),
        (lambda u, v: rg.true_divide(7, v), "float32", 7.0),
        (lambda u, v: rg.add(3, rg.tensor(True)), "int64", 4),
        (lambda u, v: rg.mul(2.5, u), "float32", 7.5),
    ],
)
def test_a_number_first_beside_a_narrow_integer_0d_tensor_promotes_as_torch(call, dtype, value):
    result = call(rg.tensor(3, dtype=rg.uint8), rg.tensor(1, dtype=rg.int32))
    assert result.dtype == getattr(rg, dtype)
    assert result.item() == value


def test_a_number_first_beside_a_narrow_integer_tensor_wraps_as_torch():
    result = rg.sub(200, rg.tensor([3, 4], dtype=rg.int8))
    assert result.dtype == rg.int8
    assert result.tolist() == [-59, -60]  # 200 is int8's -56
