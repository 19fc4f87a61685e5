/* Fast path of the height scan (aow_policy.heightmap.HeightScanner), in C.
 *
 * Why: on the robot the scan runs every control period; as ~20 NumPy calls on 187 points it
 * costs ~30 us of Python dispatch for ~1 us of arithmetic, which decided the controller step's
 * latency tail. This is the same arithmetic in one call. It covers only the common case the
 * NumPy fast path covers (every point strictly between the outermost cell centres, no NaN cell
 * gathered) and otherwise returns False without a usable result, so the Python general path
 * keeps every edge, outside-map and NaN rule in one place. The module is optional: without a
 * compiler the package installs and HeightScanner uses its NumPy fast path instead.
 *
 * bilinear_interior(values, points, out, rows, cols, row_stride, col_stride, outer_start,
 *                   inner_start, a00, a01, a02, a10, a11, a12) -> bool
 *
 *   values  float32, C-contiguous: the layer buffer; cell (i, j) is values[i*row_stride + j*col_stride]
 *   points  float64, C-contiguous, n x 2: the scan grid (x, y) in the yaw-aligned base frame
 *   out     float64, C-contiguous, writable, n: heights
 *   a..     the affine map point -> continuous unwrapped cell index (k_row, k_col)
 *
 * Per point: k = A (x, y, 1); buffer index of unwrapped u is (u + start) mod size; bilinear
 * interpolation with the operation order of the NumPy path (lerp along rows, then columns).
 * Built with -ffp-contract=off so that no multiply-add is fused and the rounding matches NumPy.
 */
#include "_buffers.h"
#include <math.h>

static const double EDGE_EPS = 1e-9;

static PyObject *bilinear_interior(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 15) {
        PyErr_Format(PyExc_TypeError, "bilinear_interior() takes 15 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t geo[6];
    for (int i = 0; i < 6; i++) {
        geo[i] = PyLong_AsSsize_t(args[3 + i]);
        if (geo[i] == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    double a[6];
    for (int i = 0; i < 6; i++) {
        a[i] = PyFloat_AsDouble(args[9 + i]);
        if (a[i] == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    const Py_ssize_t rows = geo[0], cols = geo[1], row_stride = geo[2], col_stride = geo[3];
    const Py_ssize_t outer = geo[4], inner = geo[5];
    if (rows < 2 || cols < 2 || outer < 0 || outer >= rows || inner < 0 || inner >= cols || row_stride < 0 ||
        col_stride < 0) {
        Py_RETURN_FALSE; /* too small a map or odd geometry: the general path decides */
    }

    Py_buffer vb, pb, ob;
    if (get_typed_buffer(args[0], &vb, "values", 'f', 0) < 0) {
        return NULL;
    }
    if (get_typed_buffer(args[1], &pb, "points", 'd', 0) < 0) {
        PyBuffer_Release(&vb);
        return NULL;
    }
    if (get_typed_buffer(args[2], &ob, "out", 'd', 1) < 0) {
        PyBuffer_Release(&vb);
        PyBuffer_Release(&pb);
        return NULL;
    }
    const Py_ssize_t n = ob.len / 8;
    const Py_ssize_t nvalues = vb.len / 4;
    int ok = 1;
    if (pb.len / 8 != 2 * n || (rows - 1) * row_stride + (cols - 1) * col_stride >= nvalues) {
        PyErr_SetString(PyExc_ValueError, "bilinear_interior: points must be n x 2 for n outputs, and the "
                                          "geometry must lie within values");
        ok = -1;
    }
    const float *values = (const float *)vb.buf;
    const double *points = (const double *)pb.buf;
    double *out = (double *)ob.buf;
    const double hi_row = (double)(rows - 1) - EDGE_EPS, hi_col = (double)(cols - 1) - EDGE_EPS;
    for (Py_ssize_t p = 0; ok == 1 && p < n; p++) {
        const double x = points[2 * p], y = points[2 * p + 1];
        const double kx = a[0] * x + a[1] * y + a[2];
        const double ky = a[3] * x + a[4] * y + a[5];
        if (!(kx >= EDGE_EPS && kx <= hi_row && ky >= EDGE_EPS && ky <= hi_col)) {
            ok = 0; /* also false for NaN */
            break;
        }
        const double fx0 = floor(kx), fy0 = floor(ky);
        const double fx = kx - fx0, fy = ky - fy0;
        Py_ssize_t r0 = (Py_ssize_t)fx0 + outer, c0 = (Py_ssize_t)fy0 + inner;
        if (r0 >= rows) r0 -= rows;
        if (c0 >= cols) c0 -= cols;
        const Py_ssize_t r1 = (r0 + 1 == rows) ? 0 : r0 + 1;
        const Py_ssize_t c1 = (c0 + 1 == cols) ? 0 : c0 + 1;
        const double v00 = values[r0 * row_stride + c0 * col_stride];
        const double v01 = values[r0 * row_stride + c1 * col_stride];
        const double v10 = values[r1 * row_stride + c0 * col_stride];
        const double v11 = values[r1 * row_stride + c1 * col_stride];
        if (isnan(v00) || isnan(v01) || isnan(v10) || isnan(v11)) {
            ok = 0;
            break;
        }
        const double lerp0 = (v10 - v00) * fx + v00;
        const double lerp1 = (v11 - v01) * fx + v01;
        out[p] = (lerp1 - lerp0) * fy + lerp0;
    }
    PyBuffer_Release(&vb);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&ob);
    if (ok < 0) {
        return NULL;
    }
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"bilinear_interior", (PyCFunction)(void (*)(void))bilinear_interior, METH_FASTCALL,
     "Bilinear height scan when every point lies between the outermost cell centres and no gathered cell "
     "is NaN; returns False (result unusable) otherwise."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aow_policy._scan", "C fast path of the height scan.", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module_def); }
