"""The bundled demo pair: its corpus (gettext catalogs), training, and model card."""
