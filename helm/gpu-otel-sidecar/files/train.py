"""A short Keras training run on synthetic data, to give the GPU something to do.

No dataset is downloaded and no pretrained weights are fetched: the images and labels are
random tensors generated on the device, and the model starts from random weights. It runs
in `tensorflow/tensorflow:latest-gpu` (docker/compose.yaml) and in the Helm chart's example
Job (the chart ships the same file in a ConfigMap).

Settings (environment):
  TRAIN_EPOCHS            number of epochs                           (default 5)
  TRAIN_STEPS_PER_EPOCH   batches per epoch                          (default 200)
  TRAIN_BATCH_SIZE        images per batch                           (default 64)
  TRAIN_IMAGE_SIZE        square image side in pixels                (default 128)
  TRAIN_MODEL             resnet50 | small                           (default resnet50)
  TRAIN_MIXED_PRECISION   1 to train in mixed_float16                (default 0)
"""

import os
import sys
import time


def env_int(name, default):
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r}: expected a positive integer")
    if value <= 0:
        sys.exit(f"{name}={raw!r}: expected a positive integer")
    return value


def main():
    epochs = env_int("TRAIN_EPOCHS", 5)
    steps = env_int("TRAIN_STEPS_PER_EPOCH", 200)
    batch = env_int("TRAIN_BATCH_SIZE", 64)
    size = env_int("TRAIN_IMAGE_SIZE", 128)
    model_name = os.environ.get("TRAIN_MODEL", "resnet50")
    if model_name not in ("resnet50", "small"):
        sys.exit(f"TRAIN_MODEL={model_name!r}: expected resnet50 or small")

    import tensorflow as tf  # imported late so that a bad setting fails fast

    gpus = tf.config.list_physical_devices("GPU")
    print(f"TensorFlow {tf.__version__}; visible GPUs: {[g.name for g in gpus]}", flush=True)
    if not gpus:
        print("warning: no GPU visible, training on the CPU", flush=True)
    for gpu in gpus:
        # Grow GPU memory as needed instead of reserving it all up front, so the memory
        # curves the sidecar reports show what the model really uses.
        tf.config.experimental.set_memory_growth(gpu, True)

    if os.environ.get("TRAIN_MIXED_PRECISION", "0") == "1":
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

    classes = 10
    # One synthetic batch, generated once and repeated: the input pipeline costs nothing,
    # so the GPU stays busy (utilization near 1).
    images = tf.random.uniform([batch, size, size, 3])
    labels = tf.random.uniform([batch], maxval=classes, dtype=tf.int32)
    dataset = (
        tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
    )

    if model_name == "resnet50":
        model = tf.keras.applications.ResNet50(
            weights=None, input_shape=(size, size, 3), classes=classes
        )
    else:
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(size, size, 3)),
                tf.keras.layers.Conv2D(64, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Conv2D(128, 3, activation="relu"),
                tf.keras.layers.GlobalAveragePooling2D(),
                tf.keras.layers.Dense(classes),
            ]
        )
    model.compile(
        optimizer="adam",
        loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=(model_name == "small")
        ),
        metrics=["accuracy"],
    )

    started = time.monotonic()
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps, verbose=2)
    elapsed = time.monotonic() - started
    images_seen = epochs * steps * batch
    print(
        f"done: {epochs} epochs, {images_seen} images in {elapsed:.1f} s "
        f"({images_seen / elapsed:.0f} images/s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
