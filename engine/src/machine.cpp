// placeholder: implemented by the engine work
