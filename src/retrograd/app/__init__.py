"""The application built on the library: ``retrograd train``, ``sample``, ``graph`` and
``bench``.

Nothing in the library core (``tensor``, ``autodiff``, ``backend``, ``nn``, ``optim``,
``distributed``) imports this package; it sits on top of them: the data sets
(:mod:`~retrograd.app.data`, :mod:`~retrograd.app.text`), the models the CLI trains
(:mod:`~retrograd.app.models`), the one training loop every model runs through
(:mod:`~retrograd.app.loop`; its files and summary in :mod:`~retrograd.app.outputs`, its
output folder in :mod:`~retrograd.app.runfolder`, the GPT's checkpoint file in
:mod:`~retrograd.app.checkpoints`) and the tasks it runs (:mod:`~retrograd.app.trainer`: the
CNN and MLP; :mod:`~retrograd.app.gpt`: the character GPT), the graph view
(:mod:`~retrograd.app.graphview`), the benchmark runner (:mod:`~retrograd.app.bench`) and the
command line (:mod:`~retrograd.app.cli`).
"""
