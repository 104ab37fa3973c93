/* A test shared library with no Stampede entry point. */
__attribute__((visibility("default"))) int not_a_plugin(void) { return 7; }
