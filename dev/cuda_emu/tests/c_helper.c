/* c_helper.c: a C translation unit of two_units_main.cu. */
int c_scale(int x) { return 3 * x; }
