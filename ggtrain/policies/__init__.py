"""Models by name, for the trainer: ``resolve_model(name_or_path) -> Path`` (see ``registry``), and the
built policies: small models made here because they need the environments or the update code, which
``models/`` must not import.

Adding a built policy ``my-policy``: write ``ggtrain/policies/my_policy.py`` with a builder
``my_policy_dir() -> Path`` (building into the cache with ``models.zoo.build_once``) and, at module
level, ``register_model("my-policy", my_policy_dir)``; then import the module here, so that importing
``ggtrain.policies`` registers it. ``resolve_model("my-policy")`` (so every ``ModelSpec.path`` and
``ggtrain eval --model``) then finds it, and its error message lists it.
"""

# the built policies: importing one registers its alias
from ggtrain.policies import tiny_alfworld, tiny_ring
from ggtrain.policies.registry import model_aliases, register_model, resolve_model

__all__ = ["model_aliases", "register_model", "resolve_model", "tiny_alfworld", "tiny_ring"]
