"""The application built on the library: ``retrograd train``, ``graph`` and ``bench``.

Nothing in the library core (``tensor``, ``autodiff``, ``backend``, ``nn``, ``optim``,
``distributed``) imports this package; it sits on top of them: the data sets
(:mod:`~retrograd.app.data`), the models the CLI trains (:mod:`~retrograd.app.models`), the
training loop (:mod:`~retrograd.app.trainer`), the graph view
(:mod:`~retrograd.app.graphview`), the benchmark runner (:mod:`~retrograd.app.bench`) and
the command line (:mod:`~retrograd.app.cli`).
"""
