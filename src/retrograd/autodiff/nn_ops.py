"""The neural-network ops (convolution, pooling, interpolation...): declared like the ops of
:mod:`.ops`, kept apart because their kernels are backend primitives of their own."""
