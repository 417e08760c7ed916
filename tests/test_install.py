"""The environment the README's set-up builds: no other distribution takes one of our import names."""

from importlib import metadata

from sweep.cli import install


def test_no_installed_distribution_shadows_our_packages():
    """transformers 5.25 requires Hugging Face's ``kernels``, imported as our ``kernels/``: with it
    installed, transformers' hub-kernel integration imports ours and every HF-parity test fails.
    The set-up keeps it out (pyproject.toml), and transformers' integration imports."""
    assert install.shadowed_imports() == []
    import transformers.integrations.hub_kernels  # noqa: F401  (the import that broke)


def test_a_shadowing_distribution_is_named(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda name: "0.19.1" if name == "kernels" else real(name))
    assert install.shadowed_imports() == ["kernels==0.19.1"]
