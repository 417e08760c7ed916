"""The sweep app's configuration: the typed schema (``schema``), the command line's overrides
read and checked (``overrides``) and a study's identity (``identity``)."""
