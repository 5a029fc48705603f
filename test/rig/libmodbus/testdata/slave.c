/*
 * slave.c: a Modbus RTU slave built on libmodbus, for hw/modbus's
 * reference test (TestLibmodbusReference) and test/e2e's
 * (TestLibmodbusSlaveEndToEnd), compiled and started by test/rig/libmodbus.
 * It creates a pseudo-terminal,
 * serves slave id argv[1] on its controller side, and sets its registers
 * with libmodbus's own setters (modbus_set_float_abcd and its siblings,
 * MODBUS_SET_INT32_TO_INT16, MODBUS_SET_INT64_TO_INT16). Debian's
 * libmodbus 3.1.6 setters swap the bytes of each word (libmodbus #807):
 * each value is checked with the matching getter, and when the getter
 * does not read the value back, the words are swapped byte-wise, which
 * makes them what the getter decodes. It prints, for the test to parse:
 *
 *   pty PATH
 *   point NAME FUNCTION TYPE ORDER REGISTER WORD... = VALUE [bit=N] [setter-swapped]
 *   unavailable FUNCTION FIRST
 *   ready
 *
 * where VALUE is what libmodbus's getter (or the MODBUS_GET_ macro) reads
 * from the words, printed exactly (%.17g); bit=N reads one bit of the
 * register as a bool. Registers of FUNCTION from FIRST on are outside the
 * mapping: libmodbus answers exception 2 (illegal data address). It
 * serves until killed.
 */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 600
#include <errno.h>
#include <fcntl.h>
#include <modbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

static modbus_mapping_t *mb;

static void print_point(const char *name, const char *fn, const char *type, const char *order,
                        const uint16_t *tab, int reg, int n, double value, int swapped)
{
    printf("point %s %s %s %s %d", name, fn, type, order, reg);
    for (int i = 0; i < n; i++)
        printf(" %04X", tab[reg + i]);
    printf(" = %.17g%s\n", value, swapped ? " setter-swapped" : "");
}

typedef void (*setter)(float, uint16_t *);
typedef float (*getter)(const uint16_t *);

/* set_float sets f at tab[reg] with set, checks it with get (swapping the
 * bytes of each word when Debian's setter swapped them) and prints it. */
static void set_float(const char *name, const char *fn, uint16_t *tab, int reg, const char *order,
                      setter set, getter get, float f)
{
    int swapped = 0;
    set(f, tab + reg);
    if (get(tab + reg) != f) {
        for (int i = 0; i < 2; i++)
            tab[reg + i] = (uint16_t)(tab[reg + i] << 8 | tab[reg + i] >> 8);
        swapped = 1;
    }
    if (get(tab + reg) != f) {
        fprintf(stderr, "libmodbus's getter for %s does not read %g back\n", order, f);
        exit(1);
    }
    print_point(name, fn, "f32", order, tab, reg, 2, (double)get(tab + reg), swapped);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SLAVE_ID\n", argv[0]);
        return 2;
    }
    int id = atoi(argv[1]);
    int ctl = posix_openpt(O_RDWR | O_NOCTTY);
    if (ctl < 0 || grantpt(ctl) < 0 || unlockpt(ctl) < 0) {
        perror("posix_openpt");
        return 1;
    }
    const char *path = ptsname(ctl);
    /* Hold the terminal side open in raw mode: no echo before a master
     * configures it, and reads on the controller do not fail between
     * masters. */
    int term = open(path, O_RDWR | O_NOCTTY);
    struct termios tio;
    if (term < 0 || tcgetattr(term, &tio) < 0) {
        perror(path);
        return 1;
    }
    cfmakeraw(&tio);
    tcsetattr(term, TCSANOW, &tio);

    modbus_t *ctx = modbus_new_rtu(path, 115200, 'E', 8, 1);
    mb = modbus_mapping_new(16, 16, 32, 8);
    if (ctx == NULL || mb == NULL) {
        fprintf(stderr, "libmodbus: %s\n", modbus_strerror(errno));
        return 1;
    }
    modbus_set_slave(ctx, id);
    modbus_set_socket(ctx, ctl);

    uint16_t *h = mb->tab_registers, *in = mb->tab_input_registers;
    printf("pty %s\n", path);
    set_float("f_abcd", "holding", h, 0, "ABCD", modbus_set_float_abcd, modbus_get_float_abcd, 123456.0f);
    set_float("f_badc", "holding", h, 2, "BADC", modbus_set_float_badc, modbus_get_float_badc, 123456.0f);
    set_float("f_cdab", "holding", h, 4, "CDAB", modbus_set_float_cdab, modbus_get_float_cdab, 123456.0f);
    set_float("f_dcba", "holding", h, 6, "DCBA", modbus_set_float_dcba, modbus_get_float_dcba, 123456.0f);
    set_float("neg_cdab", "holding", h, 8, "CDAB", modbus_set_float_cdab, modbus_get_float_cdab, -21.5f);
    uint32_t i32 = (uint32_t)-123456789;
    uint64_t i64 = (uint64_t)-1234567890123LL;
    MODBUS_SET_INT32_TO_INT16(h, 10, i32);
    print_point("i32_abcd", "holding", "i32", "ABCD", h, 10, 2, (double)(int32_t)(uint32_t)MODBUS_GET_INT32_FROM_INT16(h, 10), 0);
    MODBUS_SET_INT64_TO_INT16(h, 12, i64);
    print_point("i64_abcd", "holding", "i64", "ABCD", h, 12, 4, (double)(int64_t)MODBUS_GET_INT64_FROM_INT16(h, 12), 0);
    h[16] = 0xBEEF;
    print_point("u16", "holding", "u16", "ABCD", h, 16, 1, (double)h[16], 0);
    h[17] = (uint16_t)-2;
    print_point("i16", "holding", "i16", "ABCD", h, 17, 1, (double)(int16_t)h[17], 0);
    h[18] = 0x0024; /* bits 2 and 5 */
    printf("point flag_b2 holding bool - 18 %04X = %d bit=2\n", h[18], (h[18] >> 2) & 1);
    printf("point flag_b3 holding bool - 18 %04X = %d bit=3\n", h[18], (h[18] >> 3) & 1);
    uint32_t u32 = 3000000000u;
    MODBUS_SET_INT32_TO_INT16(h, 19, u32);
    print_point("u32_abcd", "holding", "u32", "ABCD", h, 19, 2, (double)(uint32_t)MODBUS_GET_INT32_FROM_INT16(h, 19), 0);
    set_float("in_dcba", "input", in, 0, "DCBA", modbus_set_float_dcba, modbus_get_float_dcba, 3.25f);
    mb->tab_bits[3] = 1;
    printf("point coil3 coil bool - 3 = 1\n");
    printf("point coil4 coil bool - 4 = 0\n");
    mb->tab_input_bits[5] = 1;
    printf("point disc5 discrete bool - 5 = 1\n");
    printf("unavailable holding %d\n", mb->nb_registers);
    printf("ready\n");
    fflush(stdout);

    uint8_t query[MODBUS_RTU_MAX_ADU_LENGTH];
    for (;;) {
        int rc = modbus_receive(ctx, query);
        if (rc > 0) {
            modbus_reply(ctx, query, rc, mb);
        } else if (rc < 0) {
            usleep(1000); /* a bad frame or the line in between masters */
        }
    }
}
