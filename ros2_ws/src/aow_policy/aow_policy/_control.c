/* Fast paths of the controller core's per-period array work (aow_policy.controller), in C.
 *
 * Why: each control period runs a few dozen NumPy calls on vectors of 16 to 243 elements. Each
 * call costs about a microsecond of Python dispatch for nanoseconds of arithmetic, and together
 * they also evict the interpreter's working set from the caches that ONNX inference refills
 * every period; both showed in the step's latency tail (bench.controller_step). Each kernel
 * here is the same arithmetic, in the same operation order, as the NumPy path beside it, bound
 * once to the controller's preallocated buffers and then called with no arguments:
 *
 *   plausible_copy(source, center, half, dest)                        -> kernel() -> bool
 *       all(|source - center| <= half) (False for NaN); only then dest[:] = source.
 *   observation(inputs, index, gain, bias_const, base_z_gain, base_z_index, low, high, out)
 *                                                                      -> kernel() -> None
 *       out[i] = float32(min(max(inputs[index[i]] * gain[i] + bias[i], low[i]), high[i])) with
 *       bias[i] = bias_const[i] + base_z_gain[i] * inputs[base_z_index] where base_z_gain[i] != 0.
 *   action_targets(actions, clip_low, clip_high, scale, offset, action, last_action, measured,
 *                  sources, gather, targets, low, high)                -> kernel() -> bool
 *       action = float64(actions); False (nothing else written) unless all finite; clipped to
 *       [clip_low, clip_high] (None: no clip); last_action = action;
 *       sources[:n] = action * scale + offset; sources[n:2n] = measured;
 *       targets = min(max(sources[gather], low), high).
 *   odometry(scratch, dest, parent_frame, quaternion_tolerance, max_linear, max_angular)
 *                                                                      -> kernel(msg) -> int
 *       nav_msgs/Odometry -> scratch (aow_policy.messages.read_odometry's arithmetic; layout in the
 *       ODOM_* enum below), then the controller's checks: 0 accepted (dest = scratch[:12]: position,
 *       base-frame twist, gravity), 1 non-finite field, 2 quaternion norm, 3 implausible speed.
 *   grid_map(layer, ndarray_type, float32_dtype)                       -> kernel(msg) -> tuple | None
 *       aow_policy.messages.grid_map_layer's common case (see run_grid_map); None: the Python
 *       function decides.
 *   gather_joint_state(position, velocity, effort, index, count, out)  -> int  (not bound)
 *       aow_policy.messages.JointStateReader's gathers of float64 buffers (see below).
 *
 * Every buffer is C-contiguous float64 ('d') unless named otherwise: actions and out are
 * float32, index and gather are intp. Sizes and index ranges are checked when a kernel is bound;
 * index arrays are copied then, the other buffers are held (so NumPy refuses to resize them) and
 * read or written live on each call. NaN propagates as in NumPy (comparisons with NaN are false,
 * so a NaN is neither raised to low nor lowered to high). Built with -ffp-contract=off so that
 * no multiply-add is fused and the rounding matches NumPy. The module is optional: without a
 * compiler the controller runs its NumPy path (same results).
 */
#include "_buffers.h"
#include <math.h>

#define MAX_BUFFERS 13

enum { PLAUSIBLE_COPY, OBSERVATION, ACTION_TARGETS, ODOMETRY, GRID_MAP };

/* the scratch vector of the odometry kernel */
enum {
    ODOM_POSITION = 0,    /* 3: x, y, z (odometry frame) */
    ODOM_LINEAR = 3,      /* 3: base-frame linear velocity */
    ODOM_ANGULAR = 6,     /* 3: base-frame angular velocity */
    ODOM_GRAVITY = 9,     /* 3: unit gravity direction in the base frame */
    ODOM_QUATERNION = 12, /* 4: x, y, z, w as received */
    ODOM_YAW = 16,
    ODOM_QUATERNION_NORM = 17,
    ODOM_LINEAR_SPEED = 18,
    ODOM_ANGULAR_SPEED = 19,
    ODOM_SIZE = 20,
    ODOM_INPUTS = 12 /* position, linear, angular, gravity: what an accepted message writes to dest */
};

typedef struct {
    PyObject_HEAD int kind;
    int nbuf;
    Py_buffer buf[MAX_BUFFERS];
    Py_ssize_t *index; /* owned copy of the index / gather array */
    Py_ssize_t n, m;   /* element counts (kind-specific) */
    Py_ssize_t base_z_index;
    int clip;
    int parent_frame;                                   /* odometry: twist in the parent frame */
    double quaternion_tolerance, max_linear, max_angular; /* odometry plausibility */
    PyObject *layer, *ndarray_type, *float32_dtype;     /* grid map: owned references */
} Kernel;

static void kernel_dealloc(Kernel *self) {
    for (int i = 0; i < self->nbuf; i++) {
        PyBuffer_Release(&self->buf[i]);
    }
    PyMem_Free(self->index);
    Py_XDECREF(self->layer);
    Py_XDECREF(self->ndarray_type);
    Py_XDECREF(self->float32_dtype);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *kernel_call(Kernel *self, PyObject *args, PyObject *kwargs);
static PyObject *run_odometry(Kernel *k, PyObject *msg);
static PyObject *run_grid_map(Kernel *k, PyObject *msg);

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aow_policy._control.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_call = (ternaryfunc)kernel_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A kernel bound to its buffers; call it with no arguments (odometry, grid_map: the message).",
};

/* Acquires args[i] as a C-contiguous buffer of `format` with `count` items (-1: any count) into
 * the kernel's next slot. Returns the item count, or -1 with an exception set. */
static Py_ssize_t hold(Kernel *k, PyObject *obj, const char *name, char format, Py_ssize_t count, int writable) {
    Py_buffer *view = &k->buf[k->nbuf];
    if (get_typed_buffer(obj, view, name, format, writable) < 0) {
        return -1;
    }
    const Py_ssize_t itemsize = view->itemsize;
    Py_ssize_t items = view->len / itemsize;
    if (count >= 0 && items != count) {
        PyErr_Format(PyExc_ValueError, "%s: %zd values, expected %zd", name, items, count);
        PyBuffer_Release(view);
        return -1;
    }
    k->nbuf++;
    return items;
}

/* Copies an intp buffer (already held in slot `slot`) into owned memory, checking 0 <= v < bound. */
static int own_index(Kernel *k, int slot, Py_ssize_t count, Py_ssize_t bound, const char *name) {
    k->index = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count > 0 ? count : 1));
    if (k->index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const Py_ssize_t *src = (const Py_ssize_t *)k->buf[slot].buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (src[i] < 0 || src[i] >= bound) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] = %zd is outside [0, %zd)", name, i, src[i], bound);
            return -1;
        }
        k->index[i] = src[i];
    }
    return 0;
}

static Kernel *new_kernel(int kind) {
    Kernel *k = PyObject_New(Kernel, &KernelType);
    if (k == NULL) {
        return NULL;
    }
    k->kind = kind;
    k->nbuf = 0;
    k->index = NULL;
    k->n = k->m = 0;
    k->base_z_index = 0;
    k->clip = 0;
    k->layer = k->ndarray_type = k->float32_dtype = NULL;
    return k;
}

/* 0, or -1 with a TypeError when a binder got the wrong number of arguments */
static int check_args(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
        return -1;
    }
    return 0;
}

static PyObject *bind_plausible_copy(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 4, "plausible_copy") < 0) {
        return NULL;
    }
    Kernel *k = new_kernel(PLAUSIBLE_COPY);
    if (k == NULL) {
        return NULL;
    }
    Py_ssize_t n = hold(k, args[0], "source", 'd', -1, 0);
    if (n < 0 || hold(k, args[1], "center", 'd', n, 0) < 0 || hold(k, args[2], "half", 'd', n, 0) < 0 ||
        hold(k, args[3], "dest", 'd', n, 1) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->n = n;
    return (PyObject *)k;
}

static PyObject *bind_observation(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 9, "observation") < 0) {
        return NULL;
    }
    Kernel *k = new_kernel(OBSERVATION);
    if (k == NULL) {
        return NULL;
    }
    Py_ssize_t inputs = hold(k, args[0], "inputs", 'd', -1, 0);
    Py_ssize_t dim = inputs < 0 ? -1 : hold(k, args[1], "index", 'n', -1, 0);
    if (dim < 0 || hold(k, args[2], "gain", 'd', dim, 0) < 0 || hold(k, args[3], "bias_const", 'd', dim, 0) < 0 ||
        hold(k, args[4], "base_z_gain", 'd', dim, 0) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->base_z_index = PyLong_AsSsize_t(args[5]);
    if (k->base_z_index == -1 && PyErr_Occurred()) {
        Py_DECREF(k);
        return NULL;
    }
    if (k->base_z_index < 0 || k->base_z_index >= inputs) {
        PyErr_Format(PyExc_ValueError, "base_z_index %zd is outside the %zd inputs", k->base_z_index, inputs);
        Py_DECREF(k);
        return NULL;
    }
    if (hold(k, args[6], "low", 'd', dim, 0) < 0 || hold(k, args[7], "high", 'd', dim, 0) < 0 ||
        hold(k, args[8], "out", 'f', dim, 1) < 0 || own_index(k, 1, dim, inputs, "index") < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->n = dim;
    return (PyObject *)k;
}

static PyObject *bind_action_targets(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 13, "action_targets") < 0) {
        return NULL;
    }
    Kernel *k = new_kernel(ACTION_TARGETS);
    if (k == NULL) {
        return NULL;
    }
    /* slots: 0 actions, [1 clip_low, 2 clip_high], scale, offset, action, last_action, measured,
     * sources, gather, targets, low, high */
    Py_ssize_t m = hold(k, args[0], "actions", 'f', -1, 0);
    if (m < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->clip = args[1] != Py_None;
    if (k->clip != (args[2] != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "clip_low and clip_high must both be None or both be arrays");
        Py_DECREF(k);
        return NULL;
    }
    if (k->clip && (hold(k, args[1], "clip_low", 'd', m, 0) < 0 || hold(k, args[2], "clip_high", 'd', m, 0) < 0)) {
        Py_DECREF(k);
        return NULL;
    }
    if (hold(k, args[3], "scale", 'd', m, 0) < 0 || hold(k, args[4], "offset", 'd', m, 0) < 0 ||
        hold(k, args[5], "action", 'd', m, 1) < 0 || hold(k, args[6], "last_action", 'd', m, 1) < 0 ||
        hold(k, args[7], "measured", 'd', m, 0) < 0 || hold(k, args[8], "sources", 'd', 2 * m + 1, 1) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    int gather_slot = k->nbuf;
    Py_ssize_t targets = hold(k, args[9], "gather", 'n', -1, 0);
    if (targets < 0 || hold(k, args[10], "targets", 'd', targets, 1) < 0 ||
        hold(k, args[11], "low", 'd', targets, 0) < 0 || hold(k, args[12], "high", 'd', targets, 0) < 0 ||
        own_index(k, gather_slot, targets, 2 * m + 1, "gather") < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->m = m;
    k->n = targets;
    return (PyObject *)k;
}

static PyObject *run_plausible_copy(Kernel *k) {
    const double *src = k->buf[0].buf, *center = k->buf[1].buf, *half = k->buf[2].buf;
    double *dest = k->buf[3].buf;
    for (Py_ssize_t i = 0; i < k->n; i++) {
        if (!(fabs(src[i] - center[i]) <= half[i])) {
            Py_RETURN_FALSE;
        }
    }
    memcpy(dest, src, sizeof(double) * (size_t)k->n);
    Py_RETURN_TRUE;
}

static PyObject *run_observation(Kernel *k) {
    const double *inputs = k->buf[0].buf, *gain = k->buf[2].buf, *bias_const = k->buf[3].buf;
    const double *z_gain = k->buf[4].buf, *low = k->buf[5].buf, *high = k->buf[6].buf;
    float *out = k->buf[7].buf;
    const double base_z = inputs[k->base_z_index];
    for (Py_ssize_t i = 0; i < k->n; i++) {
        const double bias = z_gain[i] != 0.0 ? bias_const[i] + z_gain[i] * base_z : bias_const[i];
        double v = inputs[k->index[i]] * gain[i] + bias;
        if (v < low[i]) v = low[i];
        if (v > high[i]) v = high[i];
        out[i] = (float)v;
    }
    Py_RETURN_NONE;
}

static PyObject *run_action_targets(Kernel *k) {
    int s = 0;
    const float *actions = k->buf[s++].buf;
    const double *clip_low = NULL, *clip_high = NULL;
    if (k->clip) {
        clip_low = k->buf[s++].buf;
        clip_high = k->buf[s++].buf;
    }
    const double *scale = k->buf[s++].buf, *offset = k->buf[s++].buf;
    double *action = k->buf[s++].buf, *last_action = k->buf[s++].buf;
    const double *measured = k->buf[s++].buf;
    double *sources = k->buf[s++].buf;
    s++; /* gather: the owned copy in k->index */
    double *targets = k->buf[s++].buf;
    const double *low = k->buf[s++].buf, *high = k->buf[s].buf;
    const Py_ssize_t m = k->m;
    int finite = 1;
    for (Py_ssize_t i = 0; i < m; i++) {
        action[i] = (double)actions[i];
        finite &= isfinite(action[i]) != 0;
    }
    if (!finite) {
        Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        double a = action[i];
        if (k->clip) {
            if (a < clip_low[i]) a = clip_low[i];
            if (a > clip_high[i]) a = clip_high[i];
            action[i] = a;
        }
        last_action[i] = a;
        sources[i] = a * scale[i] + offset[i];
        sources[m + i] = measured[i];
    }
    for (Py_ssize_t i = 0; i < k->n; i++) {
        double t = sources[k->index[i]];
        if (t < low[i]) t = low[i];
        if (t > high[i]) t = high[i];
        targets[i] = t;
    }
    Py_RETURN_TRUE;
}

static PyObject *s_pose, *s_position, *s_orientation, *s_twist, *s_linear, *s_angular, *s_x, *s_y, *s_z, *s_w;
static PyObject *s_layers, *s_data, *s_info, *s_resolution, *s_length_x, *s_length_y, *s_layout, *s_dim, *s_label,
    *s_size, *s_data_offset, *s_outer_start_index, *s_inner_start_index, *s_header, *s_frame_id, *s_stamp, *s_sec,
    *s_nanosec, *s_dtype, *s_column_index, *s_row_index;

/* obj.a.b -> new reference, or NULL with AttributeError */
static PyObject *attr2(PyObject *obj, PyObject *a, PyObject *b) {
    PyObject *first = PyObject_GetAttr(obj, a);
    if (first == NULL) {
        return NULL;
    }
    PyObject *second = PyObject_GetAttr(first, b);
    Py_DECREF(first);
    return second;
}

/* Reads obj.<names[i]> as doubles into out; -1 with an exception set on failure. */
static int read_floats(PyObject *obj, PyObject **names, int count, double *out) {
    for (int i = 0; i < count; i++) {
        PyObject *v = PyObject_GetAttr(obj, names[i]);
        if (v == NULL) {
            return -1;
        }
        out[i] = PyFloat_AsDouble(v);
        Py_DECREF(v);
        if (out[i] == -1.0 && PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

static PyObject *bind_odometry(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 6, "odometry") < 0) {
        return NULL;
    }
    Kernel *k = new_kernel(ODOMETRY);
    if (k == NULL) {
        return NULL;
    }
    if (hold(k, args[0], "scratch", 'd', ODOM_SIZE, 1) < 0 || hold(k, args[1], "dest", 'd', ODOM_INPUTS, 1) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    k->parent_frame = PyObject_IsTrue(args[2]);
    k->quaternion_tolerance = PyFloat_AsDouble(args[3]);
    k->max_linear = PyFloat_AsDouble(args[4]);
    k->max_angular = PyFloat_AsDouble(args[5]);
    if (k->parent_frame < 0 || PyErr_Occurred()) {
        Py_DECREF(k);
        return NULL;
    }
    return (PyObject *)k;
}

/* nav_msgs/Odometry -> scratch (see aow_policy.messages.read_odometry, whose arithmetic this is, in
 * the same order); then the controller's plausibility checks. Returns 0 (accepted: dest written),
 * 1 (non-finite field), 2 (quaternion norm off by more than the tolerance), 3 (implausible speed);
 * raises AttributeError / TypeError for a malformed message. */
static PyObject *run_odometry(Kernel *k, PyObject *msg) {
    double *o = k->buf[0].buf;
    double p[3], q[4], v[3], w[3];
    PyObject *xyz[3] = {s_x, s_y, s_z}, *xyzw[4] = {s_x, s_y, s_z, s_w};
    PyObject *pose = attr2(msg, s_pose, s_pose);
    if (pose == NULL) {
        return NULL;
    }
    PyObject *position = PyObject_GetAttr(pose, s_position);
    int bad = position == NULL || read_floats(position, xyz, 3, p) < 0;
    Py_XDECREF(position);
    PyObject *orientation = bad ? NULL : PyObject_GetAttr(pose, s_orientation);
    bad = bad || orientation == NULL || read_floats(orientation, xyzw, 4, q) < 0;
    Py_XDECREF(orientation);
    Py_DECREF(pose);
    if (bad) {
        return NULL;
    }
    PyObject *twist = attr2(msg, s_twist, s_twist);
    if (twist == NULL) {
        return NULL;
    }
    PyObject *linear = PyObject_GetAttr(twist, s_linear);
    bad = linear == NULL || read_floats(linear, xyz, 3, v) < 0;
    Py_XDECREF(linear);
    PyObject *angular = bad ? NULL : PyObject_GetAttr(twist, s_angular);
    bad = bad || angular == NULL || read_floats(angular, xyz, 3, w) < 0;
    Py_XDECREF(angular);
    Py_DECREF(twist);
    if (bad) {
        return NULL;
    }
    const int finite =
        isfinite(p[0] + p[1] + p[2] + q[0] + q[1] + q[2] + q[3] + v[0] + v[1] + v[2] + w[0] + w[1] + w[2]) != 0;
    const double norm = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    double x = q[0], y = q[1], z = q[2], qw = q[3];
    if (norm > 0.0) {
        x = q[0] / norm, y = q[1] / norm, z = q[2] / norm, qw = q[3] / norm;
    }
    const double r20 = 2.0 * (x * z - qw * y), r21 = 2.0 * (y * z + qw * x), r22 = 1.0 - 2.0 * (x * x + y * y);
    if (k->parent_frame) { /* v_base = R^T v_odom */
        const double r00 = 1.0 - 2.0 * (y * y + z * z), r01 = 2.0 * (x * y - qw * z), r02 = 2.0 * (x * z + qw * y);
        const double r10 = 2.0 * (x * y + qw * z), r11 = 1.0 - 2.0 * (x * x + z * z), r12 = 2.0 * (y * z - qw * x);
        const double v0 = r00 * v[0] + r10 * v[1] + r20 * v[2], v1 = r01 * v[0] + r11 * v[1] + r21 * v[2];
        const double v2 = r02 * v[0] + r12 * v[1] + r22 * v[2];
        const double w0 = r00 * w[0] + r10 * w[1] + r20 * w[2], w1 = r01 * w[0] + r11 * w[1] + r21 * w[2];
        const double w2 = r02 * w[0] + r12 * w[1] + r22 * w[2];
        v[0] = v0, v[1] = v1, v[2] = v2, w[0] = w0, w[1] = w1, w[2] = w2;
    }
    for (int i = 0; i < 3; i++) {
        o[ODOM_POSITION + i] = p[i];
        o[ODOM_LINEAR + i] = v[i];
        o[ODOM_ANGULAR + i] = w[i];
    }
    o[ODOM_GRAVITY] = -r20, o[ODOM_GRAVITY + 1] = -r21, o[ODOM_GRAVITY + 2] = -r22;
    for (int i = 0; i < 4; i++) {
        o[ODOM_QUATERNION + i] = q[i];
    }
    o[ODOM_YAW] = atan2(2.0 * (qw * z + x * y), 1.0 - 2.0 * (y * y + z * z));
    o[ODOM_QUATERNION_NORM] = norm;
    const double linear_speed = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    const double angular_speed = sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
    o[ODOM_LINEAR_SPEED] = linear_speed, o[ODOM_ANGULAR_SPEED] = angular_speed;
    long code = 0;
    if (!finite) {
        code = 1;
    } else if (fabs(norm - 1.0) > k->quaternion_tolerance) {
        code = 2;
    } else if (linear_speed > k->max_linear || angular_speed > k->max_angular) {
        code = 3;
    } else {
        memcpy(k->buf[1].buf, o, sizeof(double) * ODOM_INPUTS);
    }
    return PyLong_FromLong(code);
}


/* Borrows obj's buffer when it is a C-contiguous float64 one: 1; 0 (no exception) when it is
 * anything else (a list, float32, ...), so that the caller takes its general path. */
static int borrow_doubles(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *fmt = view->format ? view->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@') {
        fmt++;
    }
    if (view->itemsize != 8 || strcmp(fmt, "d") != 0) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* gather_joint_state(position, velocity, effort_or_None, index, count, out) -> int
 *
 * JointStateReader.read's gathers: out[row, i] = field[index[i]] for the rows position,
 * velocity, effort (rows of out, a writable float64 3 x n buffer; index intp, n values in
 * [0, count)). velocity and effort may be empty (their row becomes NaN). Returns the bits
 * 1 (velocity read) | 2 (effort read); 4, 8 or 16 when position, velocity or effort has neither
 * 0 (position: exactly count) nor count values (nothing is written then); -1 when a field is not
 * a contiguous float64 buffer (nothing written: the caller's general path converts it). */
static PyObject *gather_joint_state(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 6, "gather_joint_state") < 0) {
        return NULL;
    }
    const Py_ssize_t count = PyLong_AsSsize_t(args[4]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer index, out, field[3];
    int held = 0;
    long code = 0;
    if (PyObject_GetBuffer(args[3], &index, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[5], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&index);
        return NULL;
    }
    const Py_ssize_t n = index.len / (Py_ssize_t)sizeof(Py_ssize_t);
    if (index.itemsize != (Py_ssize_t)sizeof(Py_ssize_t) || out.len != 3 * n * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "gather_joint_state: index must be intp (n) and out float64 (3 x n)");
        code = -2;
    }
    const Py_ssize_t *idx = index.buf;
    for (Py_ssize_t i = 0; code == 0 && i < n; i++) {
        if (idx[i] < 0 || idx[i] >= count) {
            PyErr_Format(PyExc_ValueError, "gather_joint_state: index[%zd] = %zd is outside [0, %zd)", i, idx[i], count);
            code = -2;
        }
    }
    Py_ssize_t len[3] = {0, 0, 0};
    for (int f = 0; code == 0 && f < 3; f++) {
        if (f == 2 && args[2] == Py_None) {
            break;
        }
        if (!borrow_doubles(args[f], &field[f])) {
            code = -1;
            break;
        }
        held = f + 1;
        len[f] = field[f].len / 8;
        if (len[f] != count && (f == 0 || len[f] != 0)) {
            code |= 4L << f;
        }
    }
    if (code == 0) {
        double *rows = out.buf;
        for (int f = 0; f < 3; f++) {
            double *row = rows + f * n;
            if (f < held && len[f] == count) {
                const double *src = field[f].buf;
                for (Py_ssize_t i = 0; i < n; i++) {
                    row[i] = src[idx[i]];
                }
                code |= f == 0 ? 0 : (1L << (f - 1));
            } else if (f > 0 && f < held) { /* an empty optional field */
                for (Py_ssize_t i = 0; i < n; i++) {
                    row[i] = NAN;
                }
            }
        }
    }
    for (int f = 0; f < held; f++) {
        PyBuffer_Release(&field[f]);
    }
    PyBuffer_Release(&index);
    PyBuffer_Release(&out);
    if (code == -2) {
        return NULL;
    }
    return PyLong_FromLong(code);
}

static PyObject *bind_grid_map(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (check_args(nargs, 3, "grid_map") < 0) {
        return NULL;
    }
    if (!PyUnicode_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "grid_map(layer: str, ndarray_type: type, float32_dtype)");
        return NULL;
    }
    Kernel *k = new_kernel(GRID_MAP);
    if (k == NULL) {
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    k->layer = args[0], k->ndarray_type = args[1], k->float32_dtype = args[2];
    return (PyObject *)k;
}

/* obj.name as a double / Py_ssize_t; -1 with an exception set on failure */
static int attr_double(PyObject *obj, PyObject *name, double *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        return -1;
    }
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int attr_ssize(PyObject *obj, PyObject *name, Py_ssize_t *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        return -1;
    }
    *out = PyLong_Check(v) ? PyLong_AsSsize_t(v) : -1;
    int bad = !PyLong_Check(v) || (*out == -1 && PyErr_Occurred());
    Py_DECREF(v);
    if (bad) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* grid_map_layer's common case: the layer's float32 numpy buffer without data_offset, a
 * translation-only pose, consistent sizes and start indices. Returns the tuple of
 * GridMapLayer's fields before ``layer``, or None for anything else (the Python function then
 * decides, and words any error); exceptions met on the way are cleared, not raised. */
static PyObject *run_grid_map(Kernel *k, PyObject *msg) {
    PyObject *layers = NULL, *data = NULL, *info = NULL, *pose = NULL, *array_msg = NULL, *layout = NULL;
    PyObject *dims = NULL, *values = NULL, *dtype = NULL, *header = NULL, *frame_id = NULL, *stamp = NULL;
    PyObject *result = NULL, *tmp = NULL;
    Py_ssize_t rows = 0, cols = 0, row_stride = 0, col_stride = 0, outer = 0, inner = 0, offset = 0;
    double res, length_x, length_y, q[3], center[2], sec, nanosec;

    layers = PyObject_GetAttr(msg, s_layers);
    data = layers ? PyObject_GetAttr(msg, s_data) : NULL;
    if (data == NULL || !PyList_Check(layers) || !PyList_Check(data)) {
        goto done;
    }
    Py_ssize_t position = PySequence_Index(layers, k->layer);
    if (position < 0 || PyList_GET_SIZE(data) != PyList_GET_SIZE(layers)) {
        goto done;
    }
    info = PyObject_GetAttr(msg, s_info);
    if (info == NULL || attr_double(info, s_resolution, &res) < 0 || !(res > 0.0 && isfinite(res)) ||
        attr_double(info, s_length_x, &length_x) < 0 || attr_double(info, s_length_y, &length_y) < 0) {
        goto done;
    }
    pose = PyObject_GetAttr(info, s_pose);
    tmp = pose ? PyObject_GetAttr(pose, s_orientation) : NULL;
    if (tmp == NULL || attr_double(tmp, s_x, &q[0]) < 0 || attr_double(tmp, s_y, &q[1]) < 0 ||
        attr_double(tmp, s_z, &q[2]) < 0 || fabs(q[0]) > 1e-6 || fabs(q[1]) > 1e-6 || fabs(q[2]) > 1e-6) {
        goto done;
    }
    Py_CLEAR(tmp);
    tmp = PyObject_GetAttr(pose, s_position);
    if (tmp == NULL || attr_double(tmp, s_x, &center[0]) < 0 || attr_double(tmp, s_y, &center[1]) < 0) {
        goto done;
    }
    Py_CLEAR(tmp);
    array_msg = PyList_GET_ITEM(data, position);
    Py_INCREF(array_msg);
    layout = PyObject_GetAttr(array_msg, s_layout);
    dims = layout ? PyObject_GetAttr(layout, s_dim) : NULL;
    if (dims == NULL || !PyList_Check(dims) || PyList_GET_SIZE(dims) != 2 ||
        attr_ssize(layout, s_data_offset, &offset) < 0 || offset != 0) {
        goto done;
    }
    Py_ssize_t size[2];
    int label[2]; /* 0 column_index, 1 row_index */
    for (int d = 0; d < 2; d++) {
        PyObject *dim = PyList_GET_ITEM(dims, d);
        PyObject *name = PyObject_GetAttr(dim, s_label);
        if (name == NULL) {
            goto done;
        }
        int is_column = PyUnicode_Check(name) && PyUnicode_Compare(name, s_column_index) == 0;
        int is_row = PyUnicode_Check(name) && PyUnicode_Compare(name, s_row_index) == 0;
        Py_DECREF(name);
        if ((!is_column && !is_row) || attr_ssize(dim, s_size, &size[d]) < 0) {
            goto done;
        }
        label[d] = is_row;
    }
    if (label[0] == 0 && label[1] == 1) { /* Eigen column-major, grid_map's default */
        cols = size[0], rows = size[1], row_stride = 1, col_stride = rows;
    } else if (label[0] == 1 && label[1] == 0) {
        rows = size[0], cols = size[1], row_stride = cols, col_stride = 1;
    } else {
        goto done;
    }
    /* Python's round(): half to even, as nearbyint in the default rounding mode */
    if (rows != (Py_ssize_t)nearbyint(length_x / res) || cols != (Py_ssize_t)nearbyint(length_y / res)) {
        goto done;
    }
    values = PyObject_GetAttr(array_msg, s_data);
    if (values == NULL || !Py_IS_TYPE(values, (PyTypeObject *)k->ndarray_type)) {
        goto done;
    }
    dtype = PyObject_GetAttr(values, s_dtype);
    if (dtype != k->float32_dtype || PyObject_Length(values) != rows * cols) {
        goto done;
    }
    if (attr_ssize(msg, s_outer_start_index, &outer) < 0 || attr_ssize(msg, s_inner_start_index, &inner) < 0 ||
        outer < 0 || outer >= (rows > 1 ? rows : 1) || inner < 0 || inner >= (cols > 1 ? cols : 1)) {
        goto done;
    }
    header = PyObject_GetAttr(msg, s_header);
    frame_id = header ? PyObject_GetAttr(header, s_frame_id) : NULL;
    stamp = frame_id ? PyObject_GetAttr(header, s_stamp) : NULL;
    if (stamp == NULL || attr_double(stamp, s_sec, &sec) < 0 || attr_double(stamp, s_nanosec, &nanosec) < 0) {
        goto done;
    }
    result = Py_BuildValue("(OnnnndddddnnOd)", values, rows, cols, row_stride, col_stride, res, length_x, length_y,
                           center[0], center[1], outer, inner, frame_id, sec + nanosec * 1e-9);
done:
    Py_XDECREF(layers);
    Py_XDECREF(data);
    Py_XDECREF(info);
    Py_XDECREF(pose);
    Py_XDECREF(tmp);
    Py_XDECREF(array_msg);
    Py_XDECREF(layout);
    Py_XDECREF(dims);
    Py_XDECREF(values);
    Py_XDECREF(dtype);
    Py_XDECREF(header);
    Py_XDECREF(frame_id);
    Py_XDECREF(stamp);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}

static PyObject *kernel_call(Kernel *self, PyObject *args, PyObject *kwargs) {
    const Py_ssize_t expected = (self->kind == ODOMETRY || self->kind == GRID_MAP) ? 1 : 0;
    if (PyTuple_GET_SIZE(args) != expected || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_Format(PyExc_TypeError, "this bound kernel takes %zd positional argument(s)", expected);
        return NULL;
    }
    switch (self->kind) {
    case GRID_MAP:
        return run_grid_map(self, PyTuple_GET_ITEM(args, 0));
    case ODOMETRY:
        return run_odometry(self, PyTuple_GET_ITEM(args, 0));
    case PLAUSIBLE_COPY:
        return run_plausible_copy(self);
    case OBSERVATION:
        return run_observation(self);
    default:
        return run_action_targets(self);
    }
}

static PyMethodDef methods[] = {
    {"plausible_copy", (PyCFunction)(void (*)(void))bind_plausible_copy, METH_FASTCALL,
     "plausible_copy(source, center, half, dest) -> kernel; kernel() copies source to dest and returns True "
     "if every |source - center| <= half, else returns False and writes nothing."},
    {"observation", (PyCFunction)(void (*)(void))bind_observation, METH_FASTCALL,
     "observation(inputs, index, gain, bias_const, base_z_gain, base_z_index, low, high, out) -> kernel; "
     "kernel() writes the clipped affine observation into out (float32)."},
    {"action_targets", (PyCFunction)(void (*)(void))bind_action_targets, METH_FASTCALL,
     "action_targets(actions, clip_low, clip_high, scale, offset, action, last_action, measured, sources, "
     "gather, targets, low, high) -> kernel; kernel() maps the policy output to joint targets, False if not finite."},
    {"odometry", (PyCFunction)(void (*)(void))bind_odometry, METH_FASTCALL,
     "odometry(scratch, dest, parent_frame, quaternion_tolerance, max_linear, max_angular) -> kernel; "
     "kernel(msg) reads a nav_msgs/Odometry into scratch and returns 0 (accepted: dest written), 1 (non-finite), "
     "2 (quaternion norm), 3 (implausible speed)."},
    {"grid_map", (PyCFunction)(void (*)(void))bind_grid_map, METH_FASTCALL,
     "grid_map(layer, ndarray_type, float32_dtype) -> kernel; kernel(msg) returns grid_map_layer's fields (before "
     "the layer name) for the common case, or None (the Python function decides)."},
    {"gather_joint_state", (PyCFunction)(void (*)(void))gather_joint_state, METH_FASTCALL,
     "gather_joint_state(position, velocity, effort_or_None, index, count, out) -> int: JointStateReader's "
     "gathers; bits 1 velocity read, 2 effort read; 4/8/16 a field of the wrong length; -1 not float64 buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aow_policy._control", "C fast paths of the controller core's array work.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__control(void) {
    if (PyType_Ready(&KernelType) < 0) {
        return NULL;
    }
    PyObject **names[] = {&s_pose, &s_position, &s_orientation, &s_twist, &s_linear, &s_angular, &s_x, &s_y, &s_z,
                          &s_w, &s_layers, &s_data, &s_info, &s_resolution, &s_length_x, &s_length_y, &s_layout,
                          &s_dim, &s_label, &s_size, &s_data_offset, &s_outer_start_index, &s_inner_start_index,
                          &s_header, &s_frame_id, &s_stamp, &s_sec, &s_nanosec, &s_dtype, &s_column_index,
                          &s_row_index};
    const char *texts[] = {"pose", "position", "orientation", "twist", "linear", "angular", "x", "y", "z", "w",
                           "layers", "data", "info", "resolution", "length_x", "length_y", "layout", "dim", "label",
                           "size", "data_offset", "outer_start_index", "inner_start_index", "header", "frame_id",
                           "stamp", "sec", "nanosec", "dtype", "column_index", "row_index"};
    for (int i = 0; i < (int)(sizeof(texts) / sizeof(texts[0])); i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (*names[i] == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    /* the odometry scratch layout, for the Python side's error messages */
    const char *const_names[] = {"ODOM_SIZE", "ODOM_YAW", "ODOM_QUATERNION_NORM", "ODOM_LINEAR_SPEED",
                                 "ODOM_ANGULAR_SPEED"};
    const long const_values[] = {ODOM_SIZE, ODOM_YAW, ODOM_QUATERNION_NORM, ODOM_LINEAR_SPEED, ODOM_ANGULAR_SPEED};
    for (int i = 0; i < 5; i++) {
        if (PyModule_AddIntConstant(module, const_names[i], const_values[i]) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
