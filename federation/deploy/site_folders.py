"""Where a deployment's sites are described: the site folders its ``federation.yaml`` names.

A site is a folder holding ``site.yaml`` (:class:`~federation.core.spec.SiteSpec`) and the
endpoint files generated from it (``federation sites new NAME`` writes a starting one). A
site's folder is, in this order:

1. its entry's ``path:`` (``sites: {mysite: {path: /etc/federation/sites/mysite}}``);
2. ``<sites_dir>/<name>/``, where ``sites_dir:`` is one folder of site folders;
3. the package's example sites (``federation/sites_data/<name>/``: the embedded local
   federation's ``local``, ``delta``, ``deltaai``, ``anvil``, ``vista``).

Relative paths in ``federation.yaml`` are resolved against the folder of that file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from federation.core.model import Frozen
from federation.core.spec import PACKAGE_SITES, SITE_FILE, SiteSpec, load_site_folder, site_names

Source = Literal["path", "sites_dir", "package"]

HOW_TO_ADD = (
    "Add a site with `federation sites new NAME --dir DIR` and name DIR in federation.yaml "
    "(`sites_dir: DIR`), or give the site's entry `path: FOLDER` (docs/add-a-site.md)"
)


def resolve(path: Path, base: Path | None) -> Path:
    """``path`` with ``~`` expanded and, when relative, taken from ``base`` (else the cwd)."""
    path = path.expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return path.resolve()


class KnownSite(Frozen):
    """A site these folders describe, and where."""

    name: str
    folder: Path
    source: Source


class SiteFolders(Frozen):
    """The search order for site folders: per-site paths, ``sites_dir``, the package's."""

    sites_dir: Path | None = None
    paths: dict[str, Path] = Field(default_factory=dict)

    def where(self) -> str:
        """The folders looked in, in order, for an error message."""
        places = [f"{p} (sites.{n}.path)" for n, p in self.paths.items()]
        if self.sites_dir is not None:
            places.append(f"{self.sites_dir} (sites_dir)")
        places.append(f"{PACKAGE_SITES} (the package's example sites)")
        return ", then ".join(places)

    def known(self) -> list[KnownSite]:
        """Every site found, each once (a per-site path wins over ``sites_dir``, which wins
        over the package's example of the same name), sorted by name."""
        found: dict[str, KnownSite] = {}
        for name in site_names(PACKAGE_SITES):
            found[name] = KnownSite(name=name, folder=PACKAGE_SITES / name, source="package")
        if self.sites_dir is not None:
            for name in site_names(self.sites_dir):
                found[name] = KnownSite(name=name, folder=self.sites_dir / name, source="sites_dir")
        for name, path in self.paths.items():
            found[name] = KnownSite(name=name, folder=path, source="path")
        return [found[n] for n in sorted(found)]

    def folder(self, name: str) -> Path | None:
        """The folder of site ``name``, or None when no folder describes it."""
        if name in self.paths:
            return self.paths[name]
        for base in (self.sites_dir, PACKAGE_SITES):
            if base is not None and (base / name / SITE_FILE).is_file():
                return base / name
        return None

    def load(self, name: str) -> SiteSpec:
        """Site ``name``'s facts from its folder; ``ValueError`` saying where it looked, or
        which file is wrong and how."""
        folder = self.folder(name)
        if folder is None:
            known = ", ".join(s.name for s in self.known())
            raise ValueError(
                f"unknown site {name}; known: {known} (looked in {self.where()}). {HOW_TO_ADD}"
            )
        try:
            return load_site_folder(folder, name)
        except ValidationError as e:
            lines = [f"{folder / SITE_FILE}: {e.error_count()} problem(s):"]
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
                lines.append(f"    {loc}: {str(err['msg']).removeprefix('Value error, ')}")
            raise ValueError("\n".join(lines)) from None
