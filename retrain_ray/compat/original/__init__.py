"""What `import retrain` gives a plugin written for the original when the original is not installed
(retrain_ray/compat/finder.py): its plugin-facing modules `data`, `rewards`, `backends`,
`inference_engine.base`, `config` and `type_defs`, with the names plugins import from them."""
