"""libstdc++'s ``std::sort``, ``std::partial_sort`` and ``std::nth_element``, step for step,
on a Python list: torch's CPU kernels for ``topk`` (ATen's ``TopKImpl.h``) and ``mode``
(``TensorCompareKernel.cpp``) order tied elements as these algorithms leave them, so the
same moves give the same indices. Slow (Python), so callers run them only on the rows where
ties decide the result.

Each function rearranges ``items`` (any objects) in place under ``before(a, b)``, the
comparator torch passes ("a goes before b"); the structure follows GCC's ``stl_algo.h`` and
``stl_heap.h`` (introsort with a 16-element insertion-sort threshold, median-of-three pivots
moved to the front, unguarded Hoare partitions, heap selection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["std_nth_element", "std_partial_sort", "std_sort"]

Before = Callable[[Any, Any], bool]

#: libstdc++'s ``_S_threshold``: ranges this short are left to the final insertion sort
_THRESHOLD = 16


def _depth_limit(n: int) -> int:
    return 2 * (n.bit_length() - 1)  # 2 * std::__lg(n)


def std_sort(items: list, first: int, last: int, before: Before) -> None:
    """``std::sort(items + first, items + last, before)``."""
    if first == last:
        return
    _introsort_loop(items, first, last, _depth_limit(last - first), before)
    _final_insertion_sort(items, first, last, before)


def std_partial_sort(items: list, first: int, middle: int, last: int, before: Before) -> None:
    """``std::partial_sort``: heap selection of the smallest ``middle - first``, then a heap
    sort of them."""
    _heap_select(items, first, middle, last, before)
    _sort_heap(items, first, middle, before)


def std_nth_element(items: list, first: int, nth: int, last: int, before: Before) -> None:
    """``std::nth_element`` (libstdc++'s introselect)."""
    if first == last or nth == last:
        return
    depth = _depth_limit(last - first)
    while last - first > 3:
        if depth == 0:
            _heap_select(items, first, nth + 1, last, before)
            items[first], items[nth] = items[nth], items[first]
            return
        depth -= 1
        cut = _unguarded_partition_pivot(items, first, last, before)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(items, first, last, before)


def _introsort_loop(items: list, first: int, last: int, depth: int, before: Before) -> None:
    while last - first > _THRESHOLD:
        if depth == 0:
            std_partial_sort(items, first, last, last, before)  # heap sort
            return
        depth -= 1
        cut = _unguarded_partition_pivot(items, first, last, before)
        _introsort_loop(items, cut, last, depth, before)
        last = cut


def _unguarded_partition_pivot(items: list, first: int, last: int, before: Before) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(items, first, first + 1, mid, last - 1, before)
    return _unguarded_partition(items, first + 1, last, first, before)


def _move_median_to_first(items: list, result: int, a: int, b: int, c: int, before: Before):
    x, y, z = items[a], items[b], items[c]
    if before(x, y):
        if before(y, z):
            chosen = b
        elif before(x, z):
            chosen = c
        else:
            chosen = a
    elif before(x, z):
        chosen = a
    elif before(y, z):
        chosen = c
    else:
        chosen = b
    items[result], items[chosen] = items[chosen], items[result]


def _unguarded_partition(items: list, first: int, last: int, pivot: int, before: Before) -> int:
    pivot_item = items[pivot]
    while True:
        # (the bounds checks only stop a comparator that is no strict weak order, e.g. one
        # NaN makes incomparable, from running off the range, where C++ would be undefined)
        while first < last and before(items[first], pivot_item):
            first += 1
        last -= 1
        while last > pivot and before(pivot_item, items[last]):
            last -= 1
        if not first < last:
            return first
        items[first], items[last] = items[last], items[first]
        first += 1


def _final_insertion_sort(items: list, first: int, last: int, before: Before) -> None:
    if last - first > _THRESHOLD:
        _insertion_sort(items, first, first + _THRESHOLD, before)
        for i in range(first + _THRESHOLD, last):
            _unguarded_linear_insert(items, i, first, before)
    else:
        _insertion_sort(items, first, last, before)


def _insertion_sort(items: list, first: int, last: int, before: Before) -> None:
    if first == last:
        return
    for i in range(first + 1, last):
        value = items[i]
        if before(value, items[first]):
            items[first + 1 : i + 1] = items[first:i]
            items[first] = value
        else:
            _unguarded_linear_insert(items, i, first, before)


def _unguarded_linear_insert(items: list, last: int, lowest: int, before: Before) -> None:
    value = items[last]
    previous = last - 1
    while previous >= lowest and before(value, items[previous]):
        items[last] = items[previous]
        last = previous
        previous -= 1
    items[last] = value


def _heap_select(items: list, first: int, middle: int, last: int, before: Before) -> None:
    _make_heap(items, first, middle, before)
    for i in range(middle, last):
        if before(items[i], items[first]):
            _pop_heap(items, first, middle, i, before)


def _make_heap(items: list, first: int, last: int, before: Before) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(items, first, parent, length, items[first + parent], before)
        if parent == 0:
            return
        parent -= 1


def _pop_heap(items: list, first: int, last: int, result: int, before: Before) -> None:
    value = items[result]
    items[result] = items[first]
    _adjust_heap(items, first, 0, last - first, value, before)


def _sort_heap(items: list, first: int, last: int, before: Before) -> None:
    while last - first > 1:
        last -= 1
        _pop_heap(items, first, last, last, before)


def _adjust_heap(items: list, first: int, hole: int, length: int, value: Any, before: Before):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if before(items[first + child], items[first + child - 1]):
            child -= 1
        items[first + hole] = items[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        items[first + hole] = items[first + child - 1]
        hole = child - 1
    # __push_heap
    parent = (hole - 1) // 2
    while hole > top and before(items[first + parent], value):
        items[first + hole] = items[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    items[first + hole] = value
