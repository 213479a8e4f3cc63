"""The one plugin loader: dotted-path objects (`package.module:attribute`) and `[plugins] search_paths`.

It sits at the bottom of the layers beside `util/`: every package that accepts a plugin (modes, rewards,
engines, backends, trainers, environments) loads it through here.
"""
