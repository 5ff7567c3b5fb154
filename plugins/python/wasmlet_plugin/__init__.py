"""The wasmlet plugin SDK for Python.

A plugin is a module (``app.py``) that componentize-py turns into a WebAssembly component
against ``wit/plugin.wit``. Import the module of your plugin's kind — each works only
in a component of that world:

- :mod:`wasmlet_plugin.admission`: subclass ``Policy`` as ``Admission``;
- :mod:`wasmlet_plugin.probe`: subclass ``Handler`` as ``Probe``;
- :mod:`wasmlet_plugin.source`: subclass ``PodSource`` as ``Source``;

and :mod:`wasmlet_plugin.host` (configuration, logging, the clock) in any of them.
"""
