"""torch's view of a tensor's memory: ``data_ptr``, ``storage_offset``, ``untyped_storage``,
``storage``, and the identity answers scripts read beside them (``output_nr``,
``is_inference``, ``name``; ``is_shared`` is beside ``share_memory_`` in :mod:`.core`).

retrograd's tensors hold values, not memory: a view and its base alias through their links
(:mod:`.views`), and a chain of links ends at one root, which stands for torch's storage. Each
root is given a synthetic address the first time it is asked for one, far enough from every
other root's that no two storages overlap; a tensor's ``data_ptr`` is its root's address plus
its storage offset (:func:`.strides.storage_offset_of`) in bytes. So views at the same offset
of one storage answer the same pointer, and the code that dedupes tied weights by
``data_ptr()`` or ``untyped_storage().data_ptr()`` (checkpoint savers, ``safetensors``) finds
the ties torch would find.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ..autodiff.grad_mode import is_grad_enabled
from ..backend.sizes import ITEMSIZE
from ..errors import DTypeError, InvalidArgumentError
from .strides import storage_offset_of
from .views import root_of

__all__ = ["StorageMixin", "TypedStorage", "UntypedStorage", "is_storage"]

#: the room each root's storage is given in the synthetic address space (no retrograd tensor
#: comes near 2**40 bytes), and the counter that hands out the roots' places
_SPAN = 1 << 40
_next_place = itertools.count(1)


def _address(root: Any) -> int:
    """The synthetic address of ``root``'s storage, made once per root."""
    address = root.__dict__.get("_storage_address")
    if address is None:
        address = root.__dict__["_storage_address"] = next(_next_place) * _SPAN
    return address


class UntypedStorage:
    """torch's ``UntypedStorage`` of a tensor, as far as scripts read one: its address
    (``data_ptr``), its size in bytes (``nbytes``, ``size``, ``len``), its device, and
    identity with another tensor's storage (``==`` compares addresses, as the pointer
    comparisons that scripts make do)."""

    def __init__(self, root: Any):
        self._root = root

    def data_ptr(self) -> int:
        return _address(self._root)

    def nbytes(self) -> int:
        root = self._root
        return math.prod(root.shape) * ITEMSIZE[root.dtype]

    def size(self) -> int:
        return self.nbytes()

    def __len__(self) -> int:
        return self.nbytes()

    def element_size(self) -> int:
        return 1

    @property
    def device(self) -> Any:
        return self._root.device

    @property
    def is_cuda(self) -> bool:
        return self._root.is_cuda

    def is_shared(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UntypedStorage) and other.data_ptr() == self.data_ptr()

    def __hash__(self) -> int:
        return hash(self.data_ptr())

    def __repr__(self) -> str:
        return f"<retrograd UntypedStorage of {self.nbytes()} bytes on {self.device}>"


class TypedStorage(UntypedStorage):
    """torch's (deprecated) ``TypedStorage`` of ``tensor.storage()``: the storage counted in
    elements of the tensor's dtype."""

    def __init__(self, root: Any, dtype: Any):
        super().__init__(root)
        self.dtype = dtype

    def element_size(self) -> int:
        return ITEMSIZE[self.dtype]

    def size(self) -> int:
        return self.nbytes() // self.element_size()

    def __len__(self) -> int:
        return self.size()

    def untyped(self) -> UntypedStorage:
        return UntypedStorage(self._root)

    def tolist(self) -> list:
        return self._root.reshape(-1).tolist()

    def __repr__(self) -> str:
        return f"<retrograd TypedStorage of {self.size()} {self.dtype} on {self.device}>"


def is_storage(obj: Any) -> bool:
    """Whether ``obj`` is a storage (``untyped_storage()``'s or ``storage()``'s)."""
    return isinstance(obj, UntypedStorage)


class StorageMixin:
    """The memory and identity queries of a tensor (see the module's docstring)."""

    __slots__ = ()

    #: torch's legacy named-tensor name of a tensor: ``None``, as torch's unnamed tensors
    name: Any = None

    def storage_offset(self) -> int:
        """Where this tensor starts in its storage, in elements (torch's: a slice's start
        times its stride, 0 for a tensor of its own)."""
        return storage_offset_of(self)

    def data_ptr(self) -> int:
        """The address of this tensor's first element: its storage's address plus its offset
        in bytes (equal for views that start at the same element of one storage)."""
        return _address(root_of(self)) + storage_offset_of(self) * ITEMSIZE[self.dtype]

    def const_data_ptr(self) -> int:
        """:meth:`data_ptr` (torch's read-only form of it)."""
        return self.data_ptr()

    def is_set_to(self, tensor: Any) -> bool:
        """Whether ``tensor`` views the very memory this one does: one storage, the same
        offset, shape and strides (as torch's)."""
        if not isinstance(tensor, StorageMixin):
            raise DTypeError(f"is_set_to: expected a tensor, got {type(tensor).__name__}")
        return (
            root_of(tensor) is root_of(self)
            and tensor.storage_offset() == self.storage_offset()
            and tuple(tensor.shape) == tuple(self.shape)
            and tensor.stride() == self.stride()
        )

    def untyped_storage(self) -> UntypedStorage:
        """The storage this tensor is a view of (its root's), in bytes."""
        return UntypedStorage(root_of(self))

    def storage(self) -> TypedStorage:
        """The storage this tensor is a view of, in elements of its dtype."""
        root = root_of(self)
        if ITEMSIZE[root.dtype] != ITEMSIZE[self.dtype]:  # a view(dtype) of another width
            raise InvalidArgumentError(
                f"storage: the {self.dtype} tensor is a view(dtype) of a {root.dtype} storage; "
                "use untyped_storage(), which counts bytes"
            )
        return TypedStorage(root, self.dtype)

    def is_inference(self) -> bool:
        """Whether ``inference_mode()`` made this tensor, or it is a view of one that did
        (torch's rules: see :mod:`.inference`)."""
        return self._inference

    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule of a host copy of this tensor's values (``torch.from_dlpack(t)``,
        ``np.from_dlpack(t)``); the protocol's keywords go to NumPy's."""
        if self.dtype == "bfloat16":
            raise DTypeError(
                "__dlpack__: bfloat16 has no host array form here; cast the tensor first"
            )
        import numpy as np

        return np.ascontiguousarray(self.detach().numpy()).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The host (DLPack's kDLCPU): :meth:`__dlpack__` hands over a host copy."""
        return (1, 0)

    @property
    def output_nr(self) -> int:
        """Which output of the op that made it this tensor is (torch's numbering of the
        pieces of ``split``/``chunk``/``unbind`` that require grad; 0 otherwise)."""
        if not self.requires_grad:
            return 0
        return self.__dict__.get("_output_nr", 0)


def number_outputs(pieces: tuple, view_op: str | None = None) -> tuple:
    """Give the pieces of a multi-output view op (``split``...) torch's ``output_nr``s (read
    only where they require grad). ``view_op``, torch's name of a view op returning them
    (``"Split"``, ``"Unbind"``...), marks them as torch's views of such an op: taken with grad
    on from a tensor that requires grad, their in-place writes with grad on are refused
    (:func:`.views.refuse_multi_output_view`); taken with grad on from one that does not,
    they are torch's views "created in no_grad mode" (a write of a value that requires grad
    refused). Without it (``unsafe_split``, torch's form without view tracking) a mark the
    pieces were given is taken off."""
    tracked = bool(pieces) and pieces[0].requires_grad
    for i, piece in enumerate(pieces):
        if i and tracked:
            piece.__dict__["_output_nr"] = i
        if view_op is None:
            piece.__dict__.pop("_multi_output_view", None)
            if is_grad_enabled():  # (the mark given above; one taken under no_grad stays)
                piece.__dict__.pop("_no_grad_view", None)
        elif tracked:
            piece._multi_output_view = (i, view_op)
        elif is_grad_enabled() and piece._backend.is_autodiff:
            piece._no_grad_view = True
    return pieces
