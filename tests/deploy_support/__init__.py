"""Test support for the deploy tests: moto's missing SageMaker pieces, real server processes."""
