/* The default device and the stream that every op of the package runs on. */
#include <string.h>

#include "kiln_r.h"

kiln_stream kr_stream = {NULL};

/* Points kr_stream at the default stream of kiln's default device. */
void kr_refresh_stream(void) {
    kiln_device dev = kiln_device_new();
    kiln_stream s = kiln_stream_new();
    int rc = kiln_get_default_device(&dev) || kiln_get_default_stream(&s, dev);
    kiln_device_free(dev);
    kr_check(rc, "the default device");
    kiln_stream_free(kr_stream);
    kr_stream = s;
}

/* The default device as "cpu" or "gpu"; when `value` is one of those, sets it first. */
SEXP kr_default_device(SEXP value) {
    if (!Rf_isNull(value)) {
        const char *name = CHAR(STRING_ELT(value, 0));
        kiln_device dev = kiln_device_new();
        int rc = kiln_device_new_type(&dev, strcmp(name, "gpu") == 0 ? KILN_GPU : KILN_CPU, 0) ||
                 kiln_set_default_device(dev);
        kiln_device_free(dev);
        kr_check(rc, "mlx_default_device");
        kr_refresh_stream();
    }
    kiln_device dev = kiln_device_new();
    kiln_device_type type = KILN_CPU;
    int index = 0;
    int rc = kiln_get_default_device(&dev) || kiln_device_get_type(&type, &index, dev);
    kiln_device_free(dev);
    kr_check(rc, "mlx_default_device");
    return Rf_mkString(type == KILN_GPU ? "gpu" : "cpu");
}

/* Whether kiln can use a GPU here. */
SEXP kr_has_gpu(void) {
    bool ok = false;
    kr_check(kiln_gpu_is_available(&ok), "mlx_has_gpu");
    return Rf_ScalarLogical(ok);
}
