# --- spade package loader -------------------------------------------------------------------
# The modules above were bundled by spade from a package directory. This finder serves them,
# read-only, to `import`: each module's code is compiled from its text the first time it is
# imported, with its file name kept for tracebacks. Nothing is read from a file system.
import importlib.util as _spade_importlib_util
import linecache as _spade_linecache
import sys as _spade_sys


class _SpadePackageLoader:
    """Serves the bundled modules (`_SPADE_PACKAGE_FILES`) to `import`."""

    def __init__(self, files):
        self.files = files

    def find_spec(self, fullname, path=None, target=None):
        entry = self.files.get(fullname)
        if entry is None:
            return None
        filename, is_package, _text = entry
        spec = _spade_importlib_util.spec_from_loader(
            fullname, self, origin=filename, is_package=is_package
        )
        spec.has_location = True
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        filename, is_package, text = self.files[module.__name__]
        module.__file__ = filename
        if is_package:
            module.__path__ = []
        _spade_linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), module.__dict__)


# After the standard library (as site-packages comes after it), before the sandbox's last
# finder, which reports a module as missing.
_spade_sys.meta_path.insert(
    next(
        (i for i, f in enumerate(_spade_sys.meta_path) if getattr(f, "__name__", "") == "_MissingModule"),
        len(_spade_sys.meta_path),
    ),
    _SpadePackageLoader(_SPADE_PACKAGE_FILES),
)
# --- end of the spade package loader ---------------------------------------------------------
