"""The example's root conftest: it makes pytest put this directory first on sys.path, so the
tests import nanogpt_train and nanogpt_model as the script itself does."""
