"""Kubernetes' authz library: k8s.io/apiserver ``pkg/cel/library/cost_test.go`` ``TestAuthzLibrary``, transcribed.

Each expression compiles in Tollgate's environment and evaluates without an error under an authorizer that
allows everything, as the upstream test binds ``authorizer`` (``NewAuthorizerVal(nil, alwaysAllowAuthorizer{})``).
"""

from __future__ import annotations

import pytest

from webhook.policy.cel.authz import authorizer_value
from webhook.policy.cel.env import T, environment
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope
from webhook.policy.rbac import Attributes, Decision

UPSTREAM = [
    ("authorizer.path('/healthz')", None),
    ("authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend')", None),
    ("authorizer.group('').resource('pods').fieldSelector('spec.nodeName=example-node-name.fully.qualified.domain"
     ".name.example.com')", None),
    ("authorizer.group('').resource('pods').labelSelector('spec.nodeName=example-node-name.fully.qualified.domain"
     ".name.example.com')", None),
    ("authorizer.path('/healthz').check('get').allowed()", True),
    ("authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend')"
     ".check('create').allowed()", True),
    ("authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend')"
     ".check('create').errored()", False),
    ("authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend')"
     ".check('create').error()", ""),
]


class AllowAll:
    def __init__(self) -> None:
        self.asked: list[Attributes] = []

    def authorize(self, attributes: Attributes) -> tuple[Decision, str, str | None]:
        self.asked.append(attributes)
        return Decision.ALLOW, "", None


@pytest.mark.parametrize(("expression", "expected"), UPSTREAM)
def test_upstream_authz_cases(expression: str, expected: object) -> None:
    env = environment()
    program = env.compile(expression)
    authorizer = AllowAll()
    token = set_current_scope(VariableScope({}, None, None, authorizer=authorizer))
    try:
        value = program.eval(env.Activation({"authorizer": authorizer_value({})}))
    finally:
        reset_scope(token)
    assert value.type() != T.ERROR, value.value()
    if expected is not None:
        assert value.plain_value() == expected
        (asked,) = authorizer.asked
        if "path(" in expression:
            assert (asked.resource_request, asked.path, asked.verb) == (False, "/healthz", "get")
        else:
            assert (asked.api_group, asked.resource, asked.subresource, asked.namespace, asked.name, asked.verb) == (
                "apps", "deployments", "status", "test", "backend", "create")
