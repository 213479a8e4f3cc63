"""The one plugin loader: dotted-path objects (`package.module:attribute`) and `[plugins] search_paths`.

It sits at the bottom of the layers beside `util/`: every package that accepts a plugin (modes, rewards,
engines, backends, trainers, environments) loads it through here. `is_dotted_path` is the one test of
whether a name is a plugin reference.
"""

from retrain_ray.plugins.loader import (
    LOADER,
    PluginLoader,
    add_import_hook,
    is_dotted_path,
    load_callable,
    load_object,
    missing_folders,
    plugin_module,
    use_plugin_root,
    use_search_paths,
)

__all__ = ["LOADER", "PluginLoader", "add_import_hook", "is_dotted_path", "load_callable", "load_object",
           "missing_folders", "plugin_module", "use_plugin_root", "use_search_paths"]
