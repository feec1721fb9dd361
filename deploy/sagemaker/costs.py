"""What a stack costs to keep: the one price table of the deploy tools, and the lines a dry run ends with.

:data:`PRICES` is the table docs/deploy.md quotes: on-demand list prices in us-east-1, dated and with
their source. Prices differ by region and change; a type not in the table is named without a price
("see the pricing page") rather than guessed. :func:`stack_lines` reads what a dry run's stand-in
account holds at its end (endpoints with their instance type, autoscaling ranges, repositories, roles,
agent runtimes, model data) and says, for each, what it bills.

Pure Python; nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Where the prices come from and when they were recorded.
SOURCE = "https://aws.amazon.com/sagemaker/ai/pricing/ (real-time inference, on demand)"
AS_OF = "2026-12-03"
PRICE_REGION = "us-east-1"
#: SageMaker real-time inference, USD per instance-hour, on demand, us-east-1.
PRICES: dict[str, float] = {
    "ml.g5.xlarge": 1.408,
    "ml.g5.2xlarge": 1.515,
    "ml.g4dn.xlarge": 0.7364,
    "ml.c6i.xlarge": 0.204,
    "ml.c5.xlarge": 0.204,
    "ml.m5.xlarge": 0.23,
}
#: Storage the stack keeps until `down --all`, USD per GB-month (us-east-1).
ECR_GB_MONTH = 0.10
S3_GB_MONTH = 0.023


def hourly(instance_type: str, low: int, high: int) -> str:
    """``$1.41/h`` or ``$1.41-$5.63/h`` for ``low``..``high`` instances; the pricing page when unknown."""
    price = PRICES.get(instance_type)
    if price is None:
        return f"no price in the table for {instance_type}: see {SOURCE.split(' ')[0]}"
    span = f"${price * low:.2f}" + ("" if high == low else f"-${price * high:.2f}")
    return f"{span}/h ({instance_type} at ${price:.3f}/h)"


def header(region: str) -> str:
    where = "" if region == PRICE_REGION else f"; this run's region is {region}, whose prices differ"
    return (f"what the stack keeps, and what it bills ({PRICE_REGION} list prices recorded {AS_OF}; source: "
            f"{SOURCE}{where}):")


def _endpoint_lines(endpoints: Mapping[str, Mapping[str, Any]], configs: Mapping[str, Mapping[str, Any]],
                    scaling: Iterable[Mapping[str, Any]]) -> list[str]:
    ranges = {t["ResourceId"].split("/")[1]: (t["MinCapacity"], t["MaxCapacity"]) for t in scaling}
    lines = []
    for name, described in endpoints.items():
        variant = configs.get(described.get("EndpointConfigName", ""), {}).get("ProductionVariants", [{}])[0]
        kind, count = variant.get("InstanceType", "?"), int(variant.get("InitialInstanceCount", 1))
        low, high = ranges.get(name, (count, count))
        scaled = f"{low}-{high} instances (autoscaling)" if name in ranges else f"{count} instance(s), fixed"
        lines.append(f"endpoint {name}: {kind} x {scaled}: {hourly(kind, low, high)}, billed from creation until "
                     "it is deleted, idle or not")
    return lines


def stack_lines(*, region: str, endpoints: Mapping[str, Mapping[str, Any]],
                configs: Mapping[str, Mapping[str, Any]], scaling: Iterable[Mapping[str, Any]],
                repositories: Iterable[str], roles: Iterable[str], runtimes: Iterable[str],
                model_data: Iterable[str]) -> list[str]:
    """One line per resource the stack keeps, with what it bills; the first line names the price table."""
    lines = [header(region), *_endpoint_lines(endpoints, configs, scaling)]
    lines += [f"ECR repository {name}: ${ECR_GB_MONTH:.2f} per GB-month of images" for name in repositories]
    lines += [f"model data {url}: ${S3_GB_MONTH:.3f} per GB-month (S3 Standard)" for url in model_data]
    lines += [f"AgentCore runtime {name}: billed per use (and Bedrock per token)" for name in runtimes]
    lines += [f"IAM role {name}: no charge" for name in roles]
    if len(lines) > 1:
        lines.append("CloudWatch log groups the endpoint and agent write: per GB ingested and stored")
    return lines
