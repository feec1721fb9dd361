"""SageMaker's contract: POST /invocations and the bidirectional WebSocket /invocations-bidirectional-stream."""
