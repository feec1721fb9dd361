"""The OpenAI-compatible speech API: its routes, its request parameters and errors, and x-request-id."""
