"""The test suite's one harness: the real app built in process over a given synthesizer (``app``;
``backends.runtimes.fake.FakeSynthesizer`` is the only fake runtime), driven through a ``TestClient``
(``inproc``) or straight over ASGI (``asgi``); live servers on loopback (``live``: a uvicorn thread,
or a server entry as a subprocess); moto's AWS with its SageMaker gaps filled (``moto_sagemaker``)."""
