package config
import ("testing";"time";"github.com/hashicorp/hcl/v2";"github.com/hashicorp/hcl/v2/hclsyntax";"github.com/zclconf/go-cty/cty";"github.com/zclconf/go-cty/cty/convert")
func TestTmp(t *testing.T){
	for _, e := range []string{"1e400000","1e4000000", "1e40000000"} {
		s := time.Now()
		f, _ := hclsyntax.ParseConfig([]byte("a = "+e), "x", hcl.InitialPos)
		t.Log("parse", e, time.Since(s))
		attrs, _ := f.Body.JustAttributes()
		v, _ := attrs["a"].Expr.Value(nil)
		t.Log("value", time.Since(s))
		fl := v.AsBigFloat(); exp := fl.MantExp(nil); t.Log("exp", exp)
		convert.Convert(v, cty.String)
		t.Log("conv", time.Since(s))
	}
}
