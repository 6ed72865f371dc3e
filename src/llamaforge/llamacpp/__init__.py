"""The llama.cpp adapter floor: everything that speaks to llama.cpp's binaries, and nothing else.

* :mod:`.options` — what each binary accepts: ``--help`` probing, the options kept in a build's
  manifest (:class:`~.options.BinaryOptions`), ``-ncmoe`` or its ``-ot`` equivalent;
* :mod:`.quirks` — the registry of runtime workarounds and crash diagnosis;
* :mod:`.server` — one llama-server process: start, wait until healthy, talk HTTP, stop, failure classes;
* :mod:`.llamabench` — llama-bench's ``-o jsonl`` output: result objects, test names, per-repeat rates;
* :mod:`.devices` — ``--version`` and ``--list-devices`` output, the Vulkan and CUDA device lines.

It sits just above the foundations (``proc``, ``errors``, ``files``): the build verification
(:mod:`llamaforge.builds.verify`), the smoke run (:mod:`llamaforge.builds.smoke`), the bench engines and the
variants depend downward on it, and nothing here imports ``bench``, ``builds``, ``smoke``, ``variants``
or ``report`` (``tests/unit/test_architecture.py`` checks it). This ``__init__`` imports nothing, so
importing one module of the floor never loads the others.
"""
