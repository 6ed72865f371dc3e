"""Fleet: the same plan on several hosts over SSH (Fabric), results merged into the local store.

Modules, one job each:
  config.py   ``fleet.toml``: named hosts → SSH target, workspace, machine name, backends, environment
  remote.py   a Fabric ``Connection`` per host and the only place remote command lines are made (quoted)
  agent.py    runs ON a host (``python -m llamaforge.fleet.agent``): facts as one JSON line
  install.py  a wheel of this checkout → a venv in each host's workspace; version checks
  jobs.py     one job per host in parallel, a one-line progress per host, failures recorded per host
  merge.py    import a run exported on a host into the local store (de-duplicated, machine-tagged)
  run.py      fleet build / bench / doctor: the per-host work and the fleet run that links the imports
"""

from ..bench.cli_options import HOST_OPTIONS

#: the ``llamaforge bench`` options ``fleet.bench`` passes to every host (the rows of the bench options table marked
#: ``host``; stored in the fleet run as ``bench_args`` and checked against this list when the run is resumed:
#: :func:`llamaforge.fleet.run.check_stored_bench_args`)
BENCH_PASS = HOST_OPTIONS
