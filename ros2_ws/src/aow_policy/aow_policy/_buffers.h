/* Typed buffer access shared by the runtime's C modules (_scan.c, _control.c). */
#ifndef AOW_POLICY_BUFFERS_H
#define AOW_POLICY_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Acquires obj as a C-contiguous buffer of `format`: 'f' float32, 'd' float64, 'n' intp (NumPy
 * reports intp as 'l' or 'q'). Returns 0, or -1 with an exception that names `name`. */
static int get_typed_buffer(PyObject *obj, Py_buffer *view, const char *name, char format, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    const char *fmt = view->format ? view->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@') {
        fmt++;
    }
    const Py_ssize_t itemsize = format == 'f' ? 4 : 8;
    const int fmt_ok = format == 'n' ? (strcmp(fmt, "l") == 0 || strcmp(fmt, "q") == 0 || strcmp(fmt, "n") == 0)
                                     : (fmt[0] == format && fmt[1] == '\0');
    if (!fmt_ok || view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous %s buffer, got format '%s'", name,
                     format == 'f' ? "float32" : (format == 'd' ? "float64" : "intp"), view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#endif
