"""``talos tenants|tokens|acl|quotas``: tenants, their tokens, topic and group grants, and quotas.

These send the token of ``talos --token`` (or ``TALOS_TOKEN``): the admin token for everything, a
tenant's own token for its tokens, grants on its topics, its quotas and its quota requests.

May import: click, the public SDK and ``talos.cli``'s shared modules.
"""

from __future__ import annotations

import click

from talos.cli._common import URL, YES, admin_call
from talos.cli._output import echo_json

__all__ = ["acl", "quotas", "tenants", "tokens"]

QUOTA_FIELDS = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "partitions")


def _limits(pairs: tuple[str, ...]) -> dict[str, float | None]:
    """``NAME=VALUE`` pairs (VALUE ``none``: unlimited); sizes take K/M/G suffixes (powers of 1024)."""
    limits: dict[str, float | None] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in QUOTA_FIELDS:
            raise click.BadParameter(f"{pair!r}: expected NAME=VALUE with NAME one of {', '.join(QUOTA_FIELDS)}")
        limits[name] = None if raw.strip().lower() in ("none", "null", "unlimited") else _number(raw)
    return limits


def _number(raw: str) -> float:
    text = raw.strip().upper().removesuffix("B").removesuffix("/S")
    scale = {"K": 1024.0, "M": 1024.0**2, "G": 1024.0**3}.get(text[-1:], 1.0)
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise click.BadParameter(f"{raw!r} is not a number (e.g. 500, 2M, 1.5G)") from None


# ---------------------------------------------------------------- tenants


@click.group()
def tenants() -> None:
    """Create, list and delete tenants (the admin token)."""


@tenants.command("create")
@URL
@click.argument("name")
@click.option("--description", default="", help="What the tenant is.")
@click.option("--quota", "quota", multiple=True, metavar="NAME=VALUE", help="A starting limit (repeatable).")
def tenants_create(url: str, name: str, description: str, quota: tuple[str, ...]) -> None:
    """Create tenant NAME (a-z 0-9 _ -). Then `talos tokens create NAME` gives it a token."""
    limits = {k: v for k, v in _limits(quota).items() if v is not None}
    made = admin_call(url, lambda a: a.create_tenant(name, description=description, quota=limits or None))
    click.echo(f"created tenant {made['name']}")


@tenants.command("list")
@URL
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tenants_list(url: str, as_json: bool) -> None:
    """List tenants with their quotas and how many tokens they have."""
    found = admin_call(url, lambda a: a.list_tenants())
    if as_json:
        echo_json(found, sort_keys=True)
        return
    for tenant in found:
        limits = ", ".join(f"{k}={v:g}" for k, v in tenant["quota"].items() if v is not None) or "no limits"
        click.echo(f"{tenant['name']}\ttokens={tenant['tokens']}\t{limits}")


@tenants.command("delete")
@URL
@click.argument("name")
@YES
def tenants_delete(url: str, name: str, yes: bool) -> None:
    """Delete tenant NAME and its tokens and grants (it must own no topics)."""
    if not yes:
        click.confirm(f"delete tenant {name} and revoke its tokens?", abort=True)
    admin_call(url, lambda a: a.delete_tenant(name))
    click.echo(f"deleted tenant {name}")


# ---------------------------------------------------------------- tokens


@click.group()
def tokens() -> None:
    """Make, list and revoke a tenant's bearer tokens."""


@tokens.command("create")
@URL
@click.argument("tenant")
@click.option("--name", default="", help="What the token is for (shown in lists and the audit log).")
def tokens_create(url: str, tenant: str, name: str) -> None:
    """Make a token for TENANT and print it: it is shown this once (only its hash is kept)."""
    made = admin_call(url, lambda a: a.create_token(tenant, name=name))
    click.echo(made["token"])
    click.echo(f"token {made['id']} of {tenant}: keep it secret; it is not shown again", err=True)


@tokens.command("list")
@URL
@click.argument("tenant")
def tokens_list(url: str, tenant: str) -> None:
    """List TENANT's tokens (ids and names; never the secrets)."""
    for token in admin_call(url, lambda a: a.list_tokens(tenant)):
        click.echo(f"{token['id']}\t{token['name']}\tcreated_ms={token['created_ms']}")


@tokens.command("revoke")
@URL
@click.argument("tenant")
@click.argument("token_id")
def tokens_revoke(url: str, tenant: str, token_id: str) -> None:
    """Revoke TENANT's token TOKEN_ID: refused at once by this server, by all within security_refresh_s (2 s)."""
    admin_call(url, lambda a: a.revoke_token(tenant, token_id))
    click.echo(f"revoked {token_id}")


# ---------------------------------------------------------------- grants


@click.group()
def acl() -> None:
    """Grant tenants produce / consume / admin on topics they do not own, or the use of a consumer group."""


ACTIONS = click.option(
    "--action",
    "actions",
    multiple=True,
    type=click.Choice(["produce", "consume", "admin"]),
    help="Repeatable; `acl revoke` without it revokes all.",
)


@acl.command("grant")
@URL
@click.argument("topic")
@click.argument("tenant")
@ACTIONS
def acl_grant(url: str, topic: str, tenant: str, actions: tuple[str, ...]) -> None:
    """Let TENANT use TOPIC (a name, PREFIX* or *)."""
    if not actions:
        raise click.UsageError("give at least one --action")
    made = admin_call(url, lambda a: a.grant(topic, tenant, list(actions)))
    click.echo(f"{made['tenant']} may {', '.join(made['actions'])} {made['topic']}")


@acl.command("revoke")
@URL
@click.argument("topic")
@click.argument("tenant")
@ACTIONS
def acl_revoke(url: str, topic: str, tenant: str, actions: tuple[str, ...]) -> None:
    """Take TENANT's grant on TOPIC back (some actions, or all)."""
    admin_call(url, lambda a: a.revoke(topic, tenant, list(actions) or None))
    click.echo(f"revoked {', '.join(actions) or 'all'} of {tenant} on {topic}")


@acl.command("list")
@URL
@click.option("--topic", default=None)
@click.option("--tenant", default=None)
def acl_list(url: str, topic: str | None, tenant: str | None) -> None:
    """List grants."""
    for grant in admin_call(url, lambda a: a.list_acls(topic=topic, tenant=tenant)):
        click.echo(f"{grant['topic']}\t{grant['tenant']}\t{','.join(grant['actions'])}")


@acl.command("grant-group")
@URL
@click.argument("group")
@click.argument("tenant")
def acl_grant_group(url: str, group: str, tenant: str) -> None:
    """Let TENANT use consumer GROUP (one you own): join, commit, reset, describe, its retry and DLQ topics."""
    made = admin_call(url, lambda a: a.grant_group(group, tenant))
    click.echo(f"{made['tenant']} may use group {made['group']}")


@acl.command("revoke-group")
@URL
@click.argument("group")
@click.argument("tenant")
def acl_revoke_group(url: str, group: str, tenant: str) -> None:
    """Take TENANT's grant of consumer GROUP back."""
    admin_call(url, lambda a: a.revoke_group(group, tenant))
    click.echo(f"revoked group {group} of {tenant}")


@acl.command("list-groups")
@URL
@click.option("--group", default=None)
@click.option("--tenant", default=None)
def acl_list_groups(url: str, group: str | None, tenant: str | None) -> None:
    """List group grants."""
    for grant in admin_call(url, lambda a: a.list_group_acls(group=group, tenant=tenant)):
        click.echo(f"{grant['group']}\t{grant['tenant']}")


# ---------------------------------------------------------------- quotas


@click.group()
def quotas() -> None:
    """Show and set quotas; ask for more, and decide requests (the admin)."""


@quotas.command("show")
@URL
@click.argument("tenant")
def quotas_show(url: str, tenant: str) -> None:
    """TENANT's quota and its topics' quotas."""
    echo_json(admin_call(url, lambda a: a.quotas(tenant)), sort_keys=True)


@quotas.command("set")
@URL
@click.option("--tenant", default=None, help="Set the tenant's quota ...")
@click.option("--topic", default=None, help="... or a topic's.")
@click.argument("limits", nargs=-1, required=True, metavar="NAME=VALUE...")
def quotas_set(url: str, tenant: str | None, topic: str | None, limits: tuple[str, ...]) -> None:
    """Set limits: produce_bytes_per_s, fetch_bytes_per_s, requests_per_s, partitions (VALUE none: no limit).

    Example: talos quotas set --tenant acme produce_bytes_per_s=2M requests_per_s=500
    """
    if (tenant is None) == (topic is None):
        raise click.UsageError("give --tenant or --topic")
    echo_json(admin_call(url, lambda a: a.set_quota(tenant=tenant, topic=topic, **_limits(limits))), sort_keys=True)


@quotas.command("request")
@URL
@click.argument("resource", type=click.Choice(list(QUOTA_FIELDS)))
@click.argument("value")
@click.option("--topic", default=None, help="A topic of the tenant (default: the tenant's own quota).")
@click.option("--tenant", default=None, help="The tenant (the admin asking on its behalf).")
@click.option("--why", default="", help="The justification.")
def quotas_request(url: str, resource: str, value: str, topic: str | None, tenant: str | None, why: str) -> None:
    """Ask for RESOURCE = VALUE; prints the decision: approved, rejected (with the reason) or pending."""
    made = admin_call(
        url,
        lambda a: a.request_quota(resource, _number(value), topic=topic, tenant=tenant, justification=why),
    )
    click.echo(f"request #{made['id']}: {made['status']}: {made['reason']}")


@quotas.command("requests")
@URL
@click.option("--status", type=click.Choice(["pending", "approved", "rejected"]), default=None)
def quotas_requests(url: str, status: str | None) -> None:
    """List quota requests (the admin: all; a tenant: its own)."""
    for r in admin_call(url, lambda a: a.quota_requests(status=status)):
        target = r["topic"] or f"tenant {r['tenant']}"
        click.echo(f"#{r['id']}\t{r['status']}\t{r['tenant']}\t{target}\t{r['resource']}={r['requested']:g}")


@quotas.command("decide")
@URL
@click.argument("request_id", type=int)
@click.argument("decision", type=click.Choice(["approve", "reject"]))
@click.option("--reason", default="", help="Shown to the tenant.")
def quotas_decide(url: str, request_id: int, decision: str, reason: str) -> None:
    """Approve or reject pending request REQUEST_ID (the admin)."""
    made = admin_call(url, lambda a: a.decide_quota_request(request_id, approve=decision == "approve", reason=reason))
    click.echo(f"request #{made['id']}: {made['status']}")
