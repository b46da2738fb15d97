/* report.c - see report.h. */
#include "loadgen/report.h"

#include <math.h>
#include <string.h>

static double report_us(const struct lg_result *r, double q) { return (double)hist_quantile(&r->latency, q) / 1e3; }

void report_table_header(FILE *out, bool open_loop, bool named)
{
    if (named)
        fprintf(out, "%-16s ", "workload");
    fprintf(out, "%-10s %10s %10s %10s %9s %9s %9s %9s %9s %7s %6s  %s\n",
            named ? "target" : open_loop ? "rate/s" : "conns", "sent/s", "answers/s", "goodput/s",
            "p50 ms",
            "p90 ms", "p99 ms", "p99.9 ms", "max ms", "non-2xx", "errors", "server (queue, compute/batch, rows/batch)");
}

void report_table_row(FILE *out, const struct report_step *s)
{
    const struct lg_result *r = &s->r;
    uint64_t non2xx = 0;
    for (int c = 0; c < 600; c++)
        if (c < 200 || c >= 300)
            non2xx += r->codes[c];
    char server[96] = "";
    if (s->server)
        snprintf(server, sizeof server, "%.2f ms, %.2f ms, %.1f", s->server_queue_ms,
                 s->server_compute_ms, s->server_batch);
    /* Workloads mix the two kinds: each names its own. */
    char target[32];
    if (s->name[0])
        snprintf(target, sizeof target, s->mixed ? "%g" : s->open_loop ? "%g/s" : "%g conns",
                 s->target);
    else
        snprintf(target, sizeof target, "%g", s->target);
    if (s->name[0])
        fprintf(out, "%-16s ", s->name);
    fprintf(out, "%-10s %10.1f %10.1f %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f %7llu %6llu  %s\n",
            target, r->achieved_rate, r->throughput, r->goodput, report_us(r, .5) / 1e3,
            report_us(r, .9) / 1e3, report_us(r, .99) / 1e3, report_us(r, .999) / 1e3, report_us(r, 1) / 1e3,
            (unsigned long long)non2xx, (unsigned long long)r->errors, server);
    fflush(out);
}

static const char *report_mode(const struct report_step *s)
{
    return s->mixed ? "mixed" : s->open_loop ? "rate" : "concurrency";
}

/* One step's members (no braces): SPEC.md's shape and ours. */
static void report_json_fields(FILE *f, const struct report_step *s, const char *ind)
{
    const struct lg_result *r = &s->r;
    if (s->name[0])
        fprintf(f, "\"name\": \"%s\", ", s->name);
    fprintf(f, "\"mode\": \"%s\", \"target\": %g, \"achieved_rate\": %.3f, "
               "\"throughput\": %.3f, \"goodput\": %.3f, \"duration_s\": %g,\n"
               "%s\"latency_us\": {\"p50\": %.0f, \"p90\": %.0f, \"p99\": %.0f, "
               "\"p999\": %.0f, \"max\": %.0f, \"mean\": %.0f},\n%s\"codes\": {",
            report_mode(s), s->target, r->achieved_rate, r->throughput, r->goodput,
            r->duration_s, ind, report_us(r, .5), report_us(r, .9), report_us(r, .99),
            report_us(r, .999), report_us(r, 1), hist_mean(&r->latency) / 1e3, ind);
    int first = 1;
    for (int c = 0; c < 600; c++)
        if (r->codes[c]) {
            fprintf(f, "%s\"%d\": %llu", first ? "" : ", ", c, (unsigned long long)r->codes[c]);
            first = 0;
        }
    fprintf(f, "}, \"errors\": %llu, \"refused\": %llu, \"lost\": %llu, "
               "\"closed_idle\": %llu, \"late_sends\": %llu",
            (unsigned long long)r->errors, (unsigned long long)r->refused,
            (unsigned long long)r->lost, (unsigned long long)r->closed_idle,
            (unsigned long long)r->late_sends);
    if (s->server)
        fprintf(f, ",\n%s\"server\": {\"queue_ms\": %.3f, \"compute_ms_per_batch\": %.3f, "
                   "\"rows_per_batch\": %.2f}", ind, s->server_queue_ms, s->server_compute_ms,
                s->server_batch);
}

void report_warn_late(const struct report_step *st, double rate)
{
    if (st->open_loop && st->r.achieved_rate < 0.99 * rate && st->r.late_sends > st->r.sent / 100)
        fprintf(stderr, "batchgate-load: warning: the generator could not keep up with %.0f/s "
                        "(%llu sends late with a connection free); its latencies include its "
                        "own delay\n", rate, (unsigned long long)st->r.late_sends);
}

int report_json(const char *path, const struct report_step *s, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"steps\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n  {", i ? "," : "");
        report_json_fields(f, &s[i], "   ");
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int report_json_workloads(const char *path, const struct report_step *total,
                          const struct report_step *w, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"steps\": [\n  {");
    report_json_fields(f, total, "   ");
    fprintf(f, ",\n   \"workloads\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n    {", i ? "," : "");
        report_json_fields(f, &w[i], "     ");
        fprintf(f, "}");
    }
    fprintf(f, "]}\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int report_csv(const char *path, const struct report_step *s, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    bool named = n > 0 && s[0].name[0];
    if (named)
        fprintf(f, "workload,");
    fprintf(f, "mode,target,achieved_rate,throughput,goodput,p50_us,p90_us,p99_us,p999_us,max_us,"
               "errors,server_queue_ms,server_compute_ms,server_rows_per_batch\n");
    for (int i = 0; i < n; i++) {
        const struct lg_result *r = &s[i].r;
        if (named)
            fprintf(f, "%s,", s[i].name);
        fprintf(f, "%s,%g,%.3f,%.3f,%.3f,%.0f,%.0f,%.0f,%.0f,%.0f,%llu,",
                report_mode(&s[i]), s[i].target, r->achieved_rate,
                r->throughput, r->goodput, report_us(r, .5), report_us(r, .9), report_us(r, .99), report_us(r, .999),
                report_us(r, 1), (unsigned long long)r->errors);
        if (s[i].server)
            fprintf(f, "%.3f,%.3f,%.2f\n", s[i].server_queue_ms, s[i].server_compute_ms,
                    s[i].server_batch);
        else
            fprintf(f, ",,\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* A 1-2-5 step for axis ticks. */
static double report_nice_step(double range)
{
    double raw = range / 5, mag = pow(10, floor(log10(raw > 0 ? raw : 1)));
    double n = raw / mag;
    return (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10) * mag;
}

int report_svg(const char *path, const struct report_step *s, int n, const char *title)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    const double W = 720, H = 440, L = 70, R = 20, T = 40, B = 50;
    double xmax = 1, ymax = 1;
    for (int i = 0; i < n; i++) {
        if (s[i].r.throughput > xmax)
            xmax = s[i].r.throughput;
        if (report_us(&s[i].r, .99) / 1e3 > ymax)
            ymax = report_us(&s[i].r, .99) / 1e3;
    }
    double xs = report_nice_step(xmax), ys = report_nice_step(ymax);
    xmax = ceil(xmax / xs) * xs;
    ymax = ceil(ymax / ys) * ys;
#define X(v) (L + (W - L - R) * (v) / xmax)
#define Y(v) (H - B - (H - T - B) * (v) / ymax)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
               "fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"14\">latency vs throughput: ",
            W, H, L);
    for (const char *p = title; *p; p++)
        fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
    fprintf(f, "</text>\n");
    for (double v = 0; v <= xmax + 1e-9; v += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                X(v), T, X(v), H - B, X(v), H - B + 16, v);
    for (double v = 0; v <= ymax + 1e-9; v += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, Y(v), W - R, Y(v), L - 6, Y(v) + 4, v);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">throughput (answers/s)</text>\n"
               "<text transform=\"translate(16 %.0f) rotate(-90)\" text-anchor=\"middle\">latency (ms)</text>\n",
            (L + W - R) / 2, H - 12, (T + H - B) / 2);
    static const struct {
        double q;
        const char *name, *color;
    } lines[] = {{.5, "p50", "#1f6feb"}, {.99, "p99", "#cf222e"}};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", lines[k].color);
        for (int i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", X(s[i].r.throughput), Y(report_us(&s[i].r, lines[k].q) / 1e3));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %g: %.0f/s, "
                       "%.2f ms</title></circle>\n", X(s[i].r.throughput),
                    Y(report_us(&s[i].r, lines[k].q) / 1e3), lines[k].color, s[i].open_loop ? "rate" : "conns",
                    s[i].target, s[i].r.throughput, report_us(&s[i].r, lines[k].q) / 1e3);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n", W - R - 40,
                T + 16 + 16 * k, lines[k].color, lines[k].name);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return fclose(f) == 0 ? 0 : -1;
}
