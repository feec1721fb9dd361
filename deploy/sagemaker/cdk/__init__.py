"""The CDK app for the SageMaker speech endpoint and the AgentCore agent (aws-cdk-lib, imported here only)."""
