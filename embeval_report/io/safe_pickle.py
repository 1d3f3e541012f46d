"""An unpickler for gensim model files that resolves an exact list of globals and nothing else.

A pickle calls whatever its globals name (``GLOBAL``/``STACK_GLOBAL`` then ``REDUCE``); the standard unpickler
resolves a protocol-4 name with dots attribute by attribute, so ``("gensim.models.word2vec",
"utils.subprocess.Popen")`` reaches ``subprocess.Popen`` through a module that looks allowed. Here a global is
resolved only when its (module, name) pair is in :data:`ALLOWED` (no dots: one attribute of the named module),
and the object found must be what the pair is known to be (its ``__module__`` and ``__qualname__``); anything
else is refused with one line before the pickle calls anything.

The list is what gensim 4 writes for ``Word2Vec``, ``FastText``, ``Doc2Vec`` and ``KeyedVectors`` under every
pickle protocol (found by saving each and recording every global its load resolves), the compatibility names
gensim keeps for files of gensim 3 (``Vocab``, ``Word2VecKeyedVectors``, ``*Vocab``/``*Trainables`` stubs), and
the numpy names such files hold: arrays (``numpy.core.multiarray._reconstruct`` in files of numpy 1,
``numpy._core.multiarray._reconstruct`` of numpy 2: the same function, under the name it had when saved),
scalars and dtypes, and the model's ``numpy.random.RandomState`` (its two constructors and the ``MT19937``
bit generator; nothing else of ``numpy.random``).
"""
from __future__ import annotations

import _compat_pickle
import importlib
import pickle
import warnings
from typing import Any

from ..errors import InputError

_BUILTINS = ("set", "frozenset", "list", "dict", "tuple", "int", "float", "complex", "str", "bytes", "bytearray",
             "bool", "slice", "range", "object", "hash")
_GENSIM = {
    "gensim.models.keyedvectors": ("KeyedVectors", "CompatVocab"),
    "gensim.models.word2vec": ("Word2Vec", "Word2VecVocab", "Word2VecTrainables"),
    "gensim.models.fasttext": ("FastText", "FastTextKeyedVectors", "FastTextVocab", "FastTextTrainables"),
    "gensim.models.doc2vec": ("Doc2Vec", "Doctag", "Doc2VecVocab", "Doc2VecTrainables"),
    "gensim.utils": ("call_on_class_only", "SaveLoad"),
}
#: names kept for old files that resolve to an object defined under another name or in another module:
#: (module, name as pickled) -> (its ``__module__``, its ``__qualname__``)
_RENAMED = {
    ("gensim.models.keyedvectors", "Vocab"): ("gensim.models.keyedvectors", "CompatVocab"),
    ("gensim.models.keyedvectors", "Word2VecKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "Doc2VecKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "EuclideanKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "FastTextKeyedVectors"): ("gensim.models.fasttext", "FastTextKeyedVectors"),
    ("gensim.models.word2vec", "Vocab"): ("gensim.models.keyedvectors", "CompatVocab"),
}
#: numpy's array and random-state reconstructors, under the module names numpy 1 and numpy 2 give them
_NUMPY_CORE = ("numpy._core.multiarray", "numpy.core.multiarray")
_NUMPY_NUMERIC = ("numpy._core.numeric", "numpy.core.numeric")
_NUMPY = {
    **{(m, n): _NUMPY_CORE for m in _NUMPY_CORE for n in ("_reconstruct", "scalar")},
    **{(m, "_frombuffer"): _NUMPY_NUMERIC for m in _NUMPY_NUMERIC},
    ("numpy", "dtype"): ("numpy",),
    ("numpy", "ndarray"): ("numpy",),
    ("numpy.random._pickle", "__randomstate_ctor"): ("numpy.random._pickle",),
    ("numpy.random._pickle", "__bit_generator_ctor"): ("numpy.random._pickle",),
    ("numpy.random", "__RandomState_ctor"): ("numpy.random", "numpy.random._pickle", "numpy.random.mtrand"),
    ("numpy.random._mt19937", "MT19937"): ("numpy.random._mt19937",),
}

#: (module, name) as a pickle may name it -> (the ``__module__`` values the object may have, its ``__qualname__``)
ALLOWED: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    **{("builtins", n): (("builtins",), n) for n in _BUILTINS},
    ("copyreg", "_reconstructor"): (("copyreg",), "_reconstructor"),
    ("copyreg", "__newobj__"): (("copyreg",), "__newobj__"),
    ("copyreg", "__newobj_ex__"): (("copyreg",), "__newobj_ex__"),
    ("_codecs", "encode"): (("_codecs",), "encode"),
    **{("collections", n): (("collections",), n) for n in ("defaultdict", "OrderedDict", "Counter", "deque")},
    **{(m, n): ((m,), n) for m, names in _GENSIM.items() for n in names},
    **{key: ((module,), qualname) for key, (module, qualname) in _RENAMED.items()},
    **{key: (modules, key[1]) for key, modules in _NUMPY.items()},
}


def numpy_scalar_type(module: str, name: str) -> bool:
    """A numpy scalar type named by its own name in ``numpy`` (``numpy.float32``): a type, nothing callable
    beyond it."""
    import numpy as np

    obj = getattr(np, name, None) if module == "numpy" and name.isidentifier() else None
    return isinstance(obj, type) and issubclass(obj, np.generic) and obj.__module__ == "numpy" \
        and obj.__name__ == name


class AllowListUnpickler(pickle.Unpickler):
    """Unpickler that resolves only :data:`ALLOWED` (and numpy scalar types); anything else is an InputError."""

    def __init__(self, file: Any, label: str) -> None:
        super().__init__(file, encoding="latin1")
        self.label = label

    def find_class(self, module: str, name: str) -> Any:
        mod, nm = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))  # Python 2 names (protocol < 3)
        mod = _compat_pickle.IMPORT_MAPPING.get(mod, mod)
        expected = ALLOWED.get((mod, nm))
        if expected is None and not numpy_scalar_type(mod, nm):
            raise self._refuse(module, name)
        try:
            with warnings.catch_warnings():  # numpy 2 warns about its numpy.core names, which old files hold
                warnings.simplefilter("ignore", DeprecationWarning)
                obj = getattr(importlib.import_module(mod), nm)  # one attribute: the name has no dots
        except (ImportError, AttributeError):
            raise self._refuse(module, name) from None
        if expected is not None:
            modules, qualname = expected
            if getattr(obj, "__module__", None) not in modules or getattr(obj, "__qualname__", None) != qualname:
                raise self._refuse(module, name)
        return obj

    def _refuse(self, module: str, name: str) -> InputError:
        shown = f"{module}.{name}"[:120]
        return InputError(f"{self.label}: refused to load: the pickle references {shown}, which is not part of a "
                          "gensim model (only gensim models, numpy arrays and Python containers are loaded)")
