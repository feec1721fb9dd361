"""The test suite's shared harness: the real app over the real backends and text pipeline with
:class:`backends.fake.FakeSynthesizer`, in process (``inproc``, ``asgi``) or as a live server
(``live``: uvicorn in a thread, or ``python -m server serve`` as a subprocess)."""
