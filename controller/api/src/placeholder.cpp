// placeholder while the layer is written
