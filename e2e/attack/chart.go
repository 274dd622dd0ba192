package attack

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart renders direct vs gated attack success per family (every policy
// pooled) to path; the format follows its extension (.svg, .png).
func (rep *Report) Chart(path string) error {
	var names []string
	var direct, gated plotter.Values
	for _, f := range Families {
		d := rep.cell(func(r *Run) bool { return r.Mode == "direct" && r.Scenario.Family == f.Name })
		g := rep.cell(func(r *Run) bool { return r.Mode == "gated" && r.Scenario.Family == f.Name })
		if d.Attacks == 0 && g.Attacks == 0 {
			continue
		}
		names = append(names, familyLabel(f))
		direct = append(direct, 100*Rate(d.Successes, d.Attacks))
		gated = append(gated, 100*Rate(g.Successes, g.Attacks))
	}
	p := plot.New()
	p.Title.Text = "Attack success per family: scripted agents, every policy pooled"
	p.Y.Label.Text = "attack success (%)"
	p.Y.Min, p.Y.Max = 0, 125 // room for the legend and the labels above 100 %
	w := vg.Points(9)
	bd, err := plotter.NewBarChart(direct, w)
	if err != nil {
		return err
	}
	bd.Color, bd.LineStyle.Width, bd.Offset = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, 0, -w/2
	bg, err := plotter.NewBarChart(gated, w)
	if err != nil {
		return err
	}
	bg.Color, bg.LineStyle.Width, bg.Offset = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, 0, w/2
	p.Add(plotter.NewGrid(), bd, bg)
	// The value of every bar, so that a gated 0 % is read, not missed.
	for i, set := range []plotter.Values{direct, gated} {
		var xys plotter.XYs
		var texts []string
		for j, v := range set {
			xys = append(xys, plotter.XY{X: float64(j), Y: v + 2})
			texts = append(texts, fmt.Sprintf("%.0f", v))
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return err
		}
		l.Offset = vg.Point{X: (vg.Length(i) - 0.5) * w} // over its bar
		for k := range l.TextStyle {
			l.TextStyle[k].Font.Size = vg.Points(7)
			l.TextStyle[k].XAlign = -0.5
		}
		p.Add(l)
	}
	p.Legend.Add("direct (agent holds the rail key)", bd)
	p.Legend.Add("gated (through Countersign)", bg)
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.8, float64(len(names))-0.2
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -0.9, -0.5
	return p.Save(10*vg.Inch, 5.5*vg.Inch, path)
}
