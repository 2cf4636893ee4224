"""Tools for the data on disk, apart from loading it (:mod:`ncl.data`).

* :mod:`ncl.datatools.layout_check` and :mod:`ncl.datatools.noise_check`: ``ncl data check``;
* :mod:`ncl.datatools.download`: ``ncl data get``;
* :mod:`ncl.datatools.video_convert`: ``python -m ncl.datatools.video_convert``, video features
  into ncl's layout.

``ncl data noise`` reads the noise registry, which the DataModules use too and which
therefore lives with the data (:mod:`ncl.data.noise_registry`).
"""
