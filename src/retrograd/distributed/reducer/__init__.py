"""The reducer: gradient sync during backward (PyTorch's ``Reducer`` and its comm hooks), on
any transport.

Modules import one way, each only from those above it::

    buckets        bucket plans (pure)
    registration   a registration's wire format, the members' agreement (pure)
    rounds         ParamSlot, DeviceStep (+ the server's StepSync), Round
    comm_hooks     GradBucket, sum_hook, mean_hook: how a bucket is reduced
    fast_path      the registration agreed once: header, Agreed, Attempt, FastPath
    diagnosis      what a timeout says
    server         SyncServer: rounds, launching buckets, driving the transport
    backward_hook  GradientSyncHook (in the autodiff runtime's BACKWARD_HOOKS), BackwardSync
"""
