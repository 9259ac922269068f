# Release notes of resex-libvirt, built by reno from releasenotes/notes
# (``tox -e releasenotes``).

extensions = ["reno.sphinxext"]
project = "resex-libvirt Release Notes"
copyright = "resex-libvirt developers"
source_suffix = ".rst"
master_doc = "index"
exclude_patterns = []
html_theme = "alabaster"
html_static_path = []
